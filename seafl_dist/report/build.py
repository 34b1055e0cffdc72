"""``seafl report``: tables and plots for run dirs and sweep dirs.

    seafl report runs/buffer_size --target 0.9,0.95 --baseline buffer_size=10
    seafl report runs/a runs/b --out runs/compare

Writes into ``--out`` (default: the one directory given, else ``runs/report-<timestamp>``):
- ``report.md``: a table per grid point (mean ± std over seeds) and a table per run; with DP runs, each run's ε,
  each grid point's runs' ε composed (never averaged) and a "Privacy" section composing every DP run per data set
  (report/epsilon.py),
- ``report.csv``: the per-point table (``inf`` = never reached, ``nan`` = no ratio; ``epsilon_composed``),
- ``runs.csv``: the per-run table,
- ``accuracy_vs_time.png``: mean test accuracy over seeds against virtual time, a min–max band
  per grid point, targets as labelled dashed lines (report/figures.py),
- ``time_to_target.png``: per target, each seed's time to it as a dot and the mean as a bar,
- ``time_to_target_vs_<key>.png``: for each number a sweep varies (K, β, ...), time to target
  against it, one line per algorithm (report/value_plots.py),
- each of these three also as ``.pdf`` (vector, for papers) and ``.csv`` (the data it plots),
- ``timeline.png``: the Gantt chart of device jobs (drops marked; at most 200 devices' rows),
  when the report covers a single run,
- ``population.png``: devices online and jobs in flight against virtual time, for a single run with
  a device profile (report/churn_plots.py),
- ``participation.csv``: one row per device (and run) from each run's trace: jobs, speed, staleness, share of the
  aggregation weight and the coefficient its rule applied (report/participation.py); ``participation.png`` (and
  ``.pdf``) draws the share against speed with the speed quartiles marked, one panel per grid point, mean over
  seeds, and ``participation_quartiles.csv`` holds those means (report/participation_plot.py); under
  ``train.dp_sgd`` its ``dp_sgd_epsilon`` column is each device's ε (the run's summary.json), and
  ``dp_sgd_epsilon.png`` (with ``.pdf`` and ``.csv``) draws it against speed (report/dp_sgd_plot.py), and
  ``dp_sgd_tradeoff.png`` (with ``.pdf`` and ``.csv``) each run's final accuracy against its largest device ε, a
  line per rule over σ, its runs without DP-SGD a dashed reference (report/dp_sgd_tradeoff.py),
- for runs with ``privacy.adaptive_clip``: ``clipping_bound.png`` (with ``.pdf`` and ``.csv``), C_t of every
  aggregation against virtual time, the fixed-C runs beside it dashed (report/clip_plot.py),
- for runs with device evaluation (``run.device_eval_every``): ``device_eval_cdf.png`` and
  ``device_eval_vs_speed.png`` (with ``.pdf`` and ``.csv``), ``device_eval.csv`` and a report.md section: each
  device's final value on its own held-out data, per arm (report/device_eval_plot.py).
Targets default to the sweep file's ``targets``, else the union of the runs' ``run.targets``;
the baseline defaults to the sweep file's ``baseline``.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

from seafl_dist.report.curves import uneven_ends_note
from seafl_dist.report.figures import plot_accuracy_vs_time, plot_time_to_target
from seafl_dist.report.device_eval_plot import write_device_eval
from seafl_dist.report.epsilon import per_data
from seafl_dist.report.participation_plot import write_participation
from seafl_dist.report.dp_sgd_plot import write_dp_sgd_epsilon
from seafl_dist.report.dp_sgd_tradeoff import write_dp_sgd_tradeoff
from seafl_dist.report.clip_plot import write_clipping_bound
from seafl_dist.report.plots import plot_timeline
from seafl_dist.report.value_plots import plot_time_vs_value, swept_keys
from seafl_dist.report.metric import Metric
from seafl_dist.report.runs import common_metric, find_runs
from seafl_dist.report.tables import baseline_problem, fmt_value, group_rows, group_runs, run_rows, short

OTHER_FIGURES = [("aggregations", "aggregations", 0), ("virtual_time", "virtual time (s)", 1),
                 ("mean_staleness", "mean staleness", 2), ("notifications", "notifications", 0), ("drops", "drops", 0)]


def figure_columns(metric: Metric) -> list[tuple[str, str, int]]:
    """(figure key, column head, digits) of the tables: the target metric's best and final, then the others."""
    short = "acc" if metric.is_accuracy else metric.name
    return [(f"best_{metric.name}", f"best {short}", 4), (f"final_{metric.name}", f"final {short}", 4),
            *OTHER_FIGURES]


def _sweep_meta(paths) -> list[dict]:
    return [json.loads((Path(p) / "sweep.json").read_text()) for p in paths if (Path(p) / "sweep.json").exists()]


def default_targets(paths, runs) -> list[float]:
    metas = _sweep_meta(paths)
    from_sweeps = {tuple(m["targets"]) for m in metas if m.get("targets")}
    if len(from_sweeps) == 1 and len(metas) == len(list(paths)):
        return list(from_sweeps.pop())
    return sorted({float(t) for r in runs for t in (r.config.get("run.targets") or [])})


def default_baseline(paths) -> str | None:
    found = {m.get("baseline") for m in _sweep_meta(paths)} - {None}
    return found.pop() if len(found) == 1 else None


def fmt_ttt(st: dict) -> str:
    if st["reached"] == 0:
        return "never"
    text = f"{st['mean']:.1f}" + (f" ± {st['std']:.1f}" if st["reached"] > 1 else "")
    return text + (f" ({st['reached']}/{st['n']})" if st["reached"] < st["n"] else "")


def fmt_diverged(r: dict) -> str:
    if r["diverged_version"] is None:
        return "—"
    return f"version {r['diverged_version']} ({r['diverged_time']:.1f} s)"


def fmt_ratio(r: float) -> str:
    if math.isnan(r):
        return "—"
    if math.isinf(r):
        return "never"
    return f"{r:.2f}× ({(r - 1) * 100:+.0f}%)"


def _fmt(ms, digits: int) -> str:
    m, s = ms if isinstance(ms, tuple) else (ms, None)
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return "—"
    text = f"{m:.{digits}f}"
    return text + (f" ± {s:.{digits}f}" if s is not None and s > 0 else "")


def _md_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(lines)


def markdown(grows: list[dict], rrows: list[dict], targets: list[float], baseline: str | None,
             metric: Metric = Metric(), pooled: list[dict] = ()) -> str:
    keys = list(grows[0]["settings"]) if grows else []
    ratio_cols = baseline is not None and any(r["baseline"] for r in grows)
    FIGURES = figure_columns(metric)
    ttt_head = [h for t in targets for h in ([f"time to {metric.target_text(t)}"] +
                                             ([f"vs {baseline}"] if ratio_cols else []))]
    head = ["point", *[short(k) for k in keys], "seeds", *ttt_head, *[f[1] for f in FIGURES]]
    body = [[g["label"], *[fmt_value(g["settings"][k], k) for k in keys],
             g["seeds"] if g["seeds"] == g["runs"] else f"{g['seeds']} ({g['runs']} runs)",  # distinct seeds
             *[c for t in targets for c in ([fmt_ttt(g[f"ttt_{t:g}"])] +
                                           ([fmt_ratio(g[f"ratio_{t:g}"])] if ratio_cols else []))],
             *[_fmt(g[f[0]], f[2]) for f in FIGURES]] for g in grows]
    rhead = ["run", "seed", "status", *ttt_head, *[f[1] for f in FIGURES]]
    rbody = [[r["run"], r["seed"], r["status"],
              *[c for t in targets for c in ([fmt_ttt({"mean": r[f"ttt_{t:g}"], "std": 0, "n": 1,
                                                        "reached": int(math.isfinite(r[f"ttt_{t:g}"]))})] +
                                            ([fmt_ratio(r[f"ratio_{t:g}"])] if ratio_cols else []))],
              *[_fmt(r[f[0]], f[2]) for f in FIGURES]] for r in rrows]
    if any(r["diverged_version"] is not None for r in rrows):  # a column only where a run diverged
        head.append("diverged")
        body = [row + [f"{g['diverged']}/{g['runs']}"] for row, g in zip(body, grows)]
        rhead.append("diverged at")
        rbody = [row + [fmt_diverged(r)] for row, r in zip(rbody, rrows)]
    if any("epsilon" in r for r in rrows):  # a column only where a run had privacy.enabled (docs/privacy.md)
        head.append("ε composed")  # over the point's runs (report/epsilon.py): never their mean
        body = [row + [_fmt_epsilon(g)] for row, g in zip(body, grows)]
        rhead.append("ε")
        rbody = [row + [_fmt_epsilon(r)] for row, r in zip(rbody, rrows)]
    reach = ("each test accuracy" if metric.is_accuracy else
              f"each value of {metric.label} ({metric.direction}: at or {'above' if metric.mode == 'max' else 'below'} it)")
    notes = (f"Times are virtual seconds to reach {reach}: mean ± sample std over seeds; "
             f"\"never\" = not reached within the run's budget; \"(k/n)\" = only k of n seeds reached it "
             f"(the mean is over those k).")
    if any(r["diverged_version"] is not None for r in rrows):
        notes += (" \"diverged\": the runs that diverged (summary.json's diverged_at: a non-finite loss, a loss "
                  "above 10 × the first one, or an accuracy collapsed to near chance for 3 evaluations).")
    if any("epsilon" in r for r in rrows):
        notes += (" \"ε\": the run's ε at its privacy.delta, the largest over devices (summary.json's privacy; "
                  "docs/privacy.md); \"—\": a run without privacy. \"ε composed\": a grid point's runs composed "
                  "(never their mean: seeds on the same data spend ε together), each as its most-included device's m "
                  "at its z, which bounds every device (ε grows with m), at the runs' smallest δ.")
        if any(r.get("epsilon_seeded") for r in rrows):
            notes += (f" \"{SEEDED}\": privacy.seeded_noise, the noise drawn from run.seed: that ε holds against no "
                      "reader of config.yaml.")
    if ratio_cols:
        notes += (f" \"vs {baseline}\" = mean time / the baseline's mean time (0.78× = 22% faster), given only "
                  "where every seed of both reached the target.")
    return "\n\n".join(["# seafl report", notes, "## By grid point", _md_table(head, body),
                        "## Runs", _md_table(rhead, rbody), *privacy_section(pooled)]) + "\n"


def privacy_section(pooled: list[dict]) -> list[str]:
    """report.md's "Privacy" section: every DP run of the report composed per data set (report/epsilon.py)."""
    if not pooled:
        return []
    note = ("Every DP run of this report, composed per data set (the same data.name, data.root and data.files): what "
            "they spend together on that data, each run as its most-included device's m at its z. Runs on different "
            "data are not composed together.")
    return ["## Privacy", note, _md_table(["data", "DP runs", "δ", "ε composed"], [
        [p["data"], p["runs"], f"{p['delta']:g}", _fmt_epsilon({**p, "epsilon_seeded": p["seeded"]})]
        for p in pooled])]


SEEDED = "(seeded: none vs config.yaml)"  # beside an ε that seeded noise makes hold against no reader of the config


def _fmt_epsilon(row: dict) -> str:
    """A table's ε cell: the value (3 decimals), flagged where seeded noise was in it; "—" for a run without DP."""
    text = _fmt(row.get("epsilon", math.nan), 3)
    return f"{text} {SEEDED}" if row.get("epsilon_seeded") and text != "—" else text


def _csv_cell(v):
    if isinstance(v, float):
        return "inf" if math.isinf(v) else "nan" if math.isnan(v) else repr(v)
    return "" if v is None else v


def write_csvs(out: Path, grows: list[dict], rrows: list[dict], targets: list[float], metric: Metric = Metric()) -> None:
    flat_g = []
    for g in grows:
        row = {"label": g["label"], **g["settings"], "runs": g["runs"], "seeds": g["seeds"], "baseline": g["baseline"]}
        for t in targets:
            st = g[f"ttt_{t:g}"]
            row.update({f"ttt_{t:g}_mean": st["mean"], f"ttt_{t:g}_std": st["std"],
                        f"ttt_{t:g}_reached": st["reached"], f"ratio_{t:g}": g[f"ratio_{t:g}"]})
        for name, _, _ in figure_columns(metric) + [("wall_time_s", "", 0)]:
            row[f"{name}_mean"], row[f"{name}_std"] = g[name]
        row["diverged"] = g["diverged"]
        if "epsilon" in g:  # privacy.enabled runs: the point's runs composed (report/epsilon.py), never a mean
            row["epsilon_composed"], row["epsilon_seeded"] = g["epsilon"], g["epsilon_seeded"]
        flat_g.append(row)
    flat_r = [{k: v for k, v in {**r, **r["settings"]}.items() if k != "settings"} for r in rrows]
    for name, rows in (("report.csv", flat_g), ("runs.csv", flat_r)):
        with open(out / name, "w", newline="") as f:
            fields = list(dict.fromkeys(k for row in rows for k in row))
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for row in rows:
                w.writerow({k: _csv_cell(row.get(k)) for k in fields})


def write_report(paths, out: str | Path, *, targets: list[float] | None = None, baseline: str | None = None,
                 until: float | None = None, log_x: bool = False, seed_curves: bool = False, zoom: bool = True) -> dict:
    """Write report.md/.csv, runs.csv and the figures into ``out``; return their paths and the markdown.
    ``until``: every time axis ends there; ``log_x``: accuracy against log time; ``seed_curves``: each
    seed's curve drawn faint under its grid point's mean; ``zoom``: the close-up panel around the targets."""
    paths = [Path(p) for p in paths]
    runs = find_runs(paths)
    if not runs:
        raise FileNotFoundError("no runs found under " + ", ".join(map(str, paths)) +
                                " (a run dir holds metrics.csv; a sweep dir holds sweep.json)")
    metric = common_metric(runs)  # runs of different target metrics are refused in one line
    targets = sorted((float(t) for t in (targets if targets else default_targets(paths, runs))),
                     reverse=metric.mode == "min")  # the easiest first
    given, baseline = baseline, baseline or default_baseline(paths)
    groups = group_runs(runs)  # grid point -> its seeds' runs: every table and figure below takes these
    grows, rrows = group_rows(groups, targets, baseline), run_rows(groups, targets, baseline)
    why = baseline and not any(g["baseline"] for g in grows) and \
        baseline_problem(baseline, [g.label for g in groups], [str(g.config.get("algorithm.name")) for g in groups])
    if why:  # the "vs" columns would be left out without a word
        from seafl_dist.settings import ConfigError
        raise ConfigError(f"--baseline {baseline!r} {why}" if given else f"the sweep's baseline {baseline!r} {why}; "
                          "give another with --baseline")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(grows, rrows, targets, baseline, metric, per_data(runs))
    ends = uneven_ends_note(groups)  # runs capped by a count of aggregations: said, with the fix (report/curves.py)
    if ends:
        md = md.replace("\n\n## By grid point", f"\n\n{ends}\n\n## By grid point", 1)
        print(f"seafl: note: {ends}", file=sys.stderr)
    write_csvs(out, grows, rrows, targets, metric)
    files = {"report.md": out / "report.md", "report.csv": out / "report.csv", "runs.csv": out / "runs.csv"}
    drawn = figures(groups, targets, out, until=until, log_x=log_x, seed_curves=seed_curves, zoom=zoom, metric=metric)
    files.update({f"{stem}.{ext}": out / f"{stem}.{ext}" for stem in drawn for ext in ("png", "pdf", "csv")})
    files.update(write_participation(groups, out))  # from the runs' traces: runs of any version have it
    files.update(write_dp_sgd_epsilon(groups, out))  # DP-SGD runs: each device's ε against its speed
    files.update(write_dp_sgd_tradeoff(groups, out))  # DP-SGD runs: accuracy against the largest device ε
    files.update(write_clipping_bound(groups, out))  # adaptive clipping: C_t against time
    device_files, device_md = write_device_eval(groups, out)  # runs with device_metrics.csv only
    files.update(device_files)
    md += "\n" + device_md if device_md else ""
    (out / "report.md").write_text(md)
    if len(runs) == 1 and (runs[0].dir / "events.jsonl").exists():
        files["timeline.png"] = plot_timeline(runs[0].dir / "events.jsonl", out / "timeline.png", until=until)
        files.update(population_plot(runs[0].dir, out, until))
    return {"markdown": md, "files": files, "groups": grows, "runs": rrows, "targets": targets, "baseline": baseline,
            "figures": drawn, "metric": metric}


def figures(groups, targets: list[float], out: Path, *, until=None, log_x=False, seed_curves=False, zoom=True,
            metric: Metric = Metric()) -> dict:
    """The paper's figures of these groups, each saved as PNG, PDF and CSV: {file stem: matplotlib Figure}.
    The metric-against-time figure is ``accuracy_vs_time`` (``<metric>_vs_time`` for another metric)."""
    stem = f"{metric.name}_vs_time"
    drawn = {stem: plot_accuracy_vs_time(groups, targets, out / f"{stem}.png", until=until, log_x=log_x,
                                         seed_curves=seed_curves, zoom=zoom, metric=metric)}
    if targets:
        drawn["time_to_target"] = plot_time_to_target(groups, targets, out / "time_to_target.png", metric=metric)
        for key in swept_keys(groups):
            stem = f"time_to_target_vs_{key.rsplit('.', 1)[-1]}"
            drawn[stem] = plot_time_vs_value(groups, key, targets, out / f"{stem}.png", metric=metric)
    return drawn


def population_plot(run_dir: Path, out: Path, until: float | None) -> dict:
    """``population.png`` for a run with a device profile (docs/devices.md); {} without one, or with a
    warning when its profile cannot be read here."""
    from seafl_dist.report.sinks import read_config
    from seafl_dist.settings import ConfigError
    config = read_config(run_dir) or {}
    if not (config.get("devices") or {}).get("profile"):
        return {}
    from seafl_dist.report.churn_plots import plot_population
    try:
        return {"population.png": plot_population(run_dir, config, out / "population.png", until=until)}
    except ConfigError as err:  # the profile moved or changed: the other files still come
        print(f"seafl: warning: no population.png: {err}", file=sys.stderr)
        return {}
