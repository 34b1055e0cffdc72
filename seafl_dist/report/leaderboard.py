"""The leaderboard (docs/leaderboard.md): one data set's arms ranked, from small files a repository can hold.

    seafl report runs/leaderboard-mnist --extract docs/leaderboard/mnist --commit 9f4ef74   # the small files
    seafl report docs/leaderboard/mnist --leaderboard --out docs/leaderboard/mnist          # the tables, the figure

It owns two things:

- **The extract** (:func:`extract`): of each finished run of a sweep dir, its ``config.yaml``, ``summary.json``
  and ``metrics.csv`` as they are, and ``trace.json``: the figures of its trace (``events.jsonl``, too large to
  commit) that say why an arm leads (:func:`trace_figures`) and what its attackers got (report/robustness.py's
  ``threat_figures``). Beside them the sweep's ``sweep.json`` (so the
  extract reads as the sweep: its labels, targets, baseline) and ``leaderboard.json``: the commit that made each
  run and the machine time of the sweep (the sum of its runs' wall times). ``seafl report`` reads an extract as
  it reads the sweep dir.
- **The tables** (:func:`rows`, :func:`markdown`): per arm, each seed's time to each target, the mean ± sample
  sd over the seeds that reached it and how many did, the best accuracy, the rank and the seeds won; and the
  trace figures per arm. Everything comes from the extract, so the page's tables are regenerated from committed
  files byte for byte (tests/unit/test_leaderboard.py checks it).

**Rank**: arms ordered by how many seeds reached the highest target (more first), then by the median of those
seeds' times (faster first), then by the mean best accuracy (higher first), then by label. **Seeds won**: in
each seed, the arm with the smallest time to the highest target (every arm tied at it wins; a seed no arm
reached it in has no winner). Times are virtual seconds.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from seafl_dist.report.robustness import threat_figures
from seafl_dist.report.runs import RunResult, find_runs
from seafl_dist.report.sinks import read_events
from seafl_dist.report.tables import group_runs
from seafl_dist.settings import ConfigError

SMALL_FILES = ("config.yaml", "summary.json", "metrics.csv")
NEVER = "never"


def trace_figures(events: list[dict], buffer_size: int, virtual_time: float) -> dict:
    """What a run's trace says about its pace, from its events:

    - ``aggregations_per_100s``: aggregations per 100 virtual seconds of the run;
    - ``mean_staleness``: over the updates aggregated and not rejected;
    - ``weighted_staleness``: the same mean, each update weighted by the weight its rule gave it (its ``weight``
      in the aggregate event): below ``mean_staleness`` where the rule gives stale updates less say;
    - ``waiting_share``: the share of the run's virtual time the server waited on the staleness limit β, with
      K = ``buffer_size`` updates already in: summed over aggregations, the aggregation's time less the time its
      buffer first held K updates (the K-th earliest arrival, ``finish``, among the updates it aggregated; the
      buffer is empty after each aggregation and every update in it is aggregated, SPEC's server loop).
    """
    arrived = {(e["device"], e["job"]): e["time"] for e in events if e["event"] == "finish"}
    aggregations, waited, count, stale, weight, weighted = 0, 0.0, 0, 0.0, 0.0, 0.0
    for e in events:
        if e["event"] != "aggregate":
            continue
        aggregations += 1
        times = sorted(arrived[(u["device"], u["job"])] for u in e["updates"])
        if len(times) >= buffer_size:
            waited += e["time"] - times[buffer_size - 1]
        for u in e["updates"]:
            if u.get("rejected"):
                continue
            count += 1
            stale += u["staleness"]
            w = abs(float(u.get("weight") or 0.0))
            weight += w
            weighted += w * u["staleness"]
    return {"aggregations_per_100s": 100.0 * aggregations / virtual_time if virtual_time > 0 else math.nan,
            "mean_staleness": stale / count if count else math.nan,
            "weighted_staleness": weighted / weight if weight > 0 else math.nan,
            "waiting_share": waited / virtual_time if virtual_time > 0 else math.nan}


def git_commit() -> str:
    """The commit of the checkout this package runs from, short; ``unknown`` outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def extract(sweep_dir: str | Path, out: str | Path, commit: str | None = None) -> list[Path]:
    """Copy each finished run of ``sweep_dir`` into ``out`` as its small files and its ``trace.json``; write
    ``out``'s ``sweep.json`` (the sweep's, with the extracted runs only) and ``leaderboard.json``. A run not
    completed (interrupted, failed, still running) is left out; ``leaderboard.json`` counts the runs kept
    beside the sweep's. An extract already in ``out`` keeps its runs that ``sweep_dir`` does not hold finished (a
    sweep continued on another machine, in another sweep dir, or at a later commit for arms added since): they stay,
    each with its own wall time and the commit that made it (``leaderboard.json``'s ``run_commits``; the same run
    extracted again, its summary unchanged, keeps its commit; a run made again takes the new one). Returns the run
    dirs written."""
    sweep_dir, out = Path(sweep_dir), Path(out)
    meta_path = sweep_dir / "sweep.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"'{sweep_dir}' holds no sweep.json: give a sweep dir (seafl sweep's --out)")
    meta = json.loads(meta_path.read_text())
    done = {r.dir.name: r for r in find_runs([sweep_dir]) if r.status == "completed"}
    commit = commit or git_commit()
    before = run_commits(out)
    out.mkdir(parents=True, exist_ok=True)
    written, wall, commits = [], 0.0, {}
    for entry in meta.get("runs", []):
        run = done.get(entry["name"])
        if run is None:
            kept = out / entry["name"]
            if entry["name"] in before and all((kept / f).exists() for f in (*SMALL_FILES, "trace.json")):
                wall += float(json.loads((kept / "summary.json").read_text()).get("wall_time_s") or 0.0)
                written.append(kept)
                commits[entry["name"]] = before[entry["name"]]
            continue
        dest = out / entry["name"]
        same = entry["name"] in before and (dest / "summary.json").exists() and \
            (dest / "summary.json").read_bytes() == (run.dir / "summary.json").read_bytes()
        dest.mkdir(exist_ok=True)
        for name in SMALL_FILES:
            shutil.copyfile(run.dir / name, dest / name)
        k, events = int(run.config["algorithm.buffer_size"]), read_events(run.dir / "events.jsonl")
        trace = {**trace_figures(events, k, float(run.summary["virtual_time"])), **threat_figures(events)}
        (dest / "trace.json").write_text(json.dumps(trace, indent=1, sort_keys=True) + "\n")
        wall += float(run.summary.get("wall_time_s") or 0.0)
        written.append(dest)
        commits[entry["name"]] = before[entry["name"]] if same else commit
    kept = {d.name for d in written}
    (out / "sweep.json").write_text(json.dumps({**meta, "runs": [r for r in meta.get("runs", []) if r["name"] in kept]},
                                               indent=1) + "\n")
    (out / "leaderboard.json").write_text(json.dumps(
        {"run_commits": commits, "machine_time_s": round(wall, 1), "runs": len(written),
         "runs_in_sweep": len(meta.get("runs", []))}, indent=1, sort_keys=True) + "\n")
    return written


def run_commits(extract_dir: str | Path) -> dict[str, str]:
    """Each run of an extract and the commit that made it ({} where ``extract_dir`` holds no extract)."""
    path = Path(extract_dir) / "leaderboard.json"
    return dict(json.loads(path.read_text())["run_commits"]) if path.exists() else {}


def _commits_line(run_commits: dict[str, str]) -> str:
    """"commit `a`" for one commit; "commits `a` (n runs: their arms) and `b` (...)" in order of first appearance."""
    by: dict[str, list[str]] = {}
    for name, commit in run_commits.items():
        by.setdefault(commit, []).append(name)
    if len(by) == 1:
        return f"commit `{next(iter(by))}`"
    parts = []
    for commit, names in by.items():
        arms = list(dict.fromkeys(n.rsplit(",seed=", 1)[0] for n in names))
        parts.append(f"`{commit}` ({len(names)} run{'' if len(names) == 1 else 's'}: {', '.join(arms)})")
    return "commits " + ", ".join(parts[:-1]) + " and " + parts[-1]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.inf


def rows(runs: list[RunResult], targets: list[float]) -> list[dict]:
    """One row per arm (a sweep's grid point), in rank order (the module's docstring): each seed's time to each
    target (``inf``: never), the mean ± sd over the seeds that reached it, the best accuracy, the seeds won at the
    highest target, and the mean of each trace figure over the seeds (``trace.json``; absent: nan)."""
    top = max(targets)
    arms = []
    for g in group_runs(runs):
        by_seed = sorted(g.runs, key=lambda r: (r.seed is None, r.seed))
        arm = {"label": g.label, "seeds": [r.seed for r in by_seed], "times": {}, "best": [], "trace": {}}
        for t in targets:
            arm["times"][t] = [r.ttt(t) for r in by_seed]
        arm["best"] = [r.figures()[f"best_{r.metric.name}"] for r in by_seed]
        arm["ends"] = [r.config.get("run.max_time") or r.figures()["virtual_time"] for r in by_seed]  # its budget
        traces = [_trace(r) for r in by_seed]
        for key in ("aggregations_per_100s", "mean_staleness", "weighted_staleness", "waiting_share"):
            vals = [tr[key] for tr in traces if key in tr and not math.isnan(tr[key])]
            arm["trace"][key] = statistics.fmean(vals) if vals else math.nan
        arm["wall_s"] = sum(float(r.summary.get("wall_time_s") or 0.0) for r in by_seed)
        reached = [x for x in arm["times"][top] if math.isfinite(x)]
        arm["order"] = (-len(reached), _median(reached), -statistics.fmean(arm["best"]), g.label)
        arm["won"] = 0
        arms.append(arm)
    seeds = sorted({s for a in arms for s in a["seeds"]}, key=lambda s: (s is None, s))
    for seed in seeds:
        times = {id(a): a["times"][top][a["seeds"].index(seed)] for a in arms if seed in a["seeds"]}
        best = min(times.values(), default=math.inf)
        if math.isfinite(best):
            for a in arms:
                if times.get(id(a)) == best:
                    a["won"] += 1
    arms.sort(key=lambda a: a["order"])
    for i, a in enumerate(arms, 1):
        a["rank"] = i
    return arms


def chosen(arms: list[dict]) -> dict[str, str]:
    """A tuning sweep's choice (docs/leaderboard.md, "The protocol"): for each method, the label of its first trial
    in rank order. A trial's label is ``<method>:<setting>``; an arm without a colon is a method of its own."""
    picks: dict[str, str] = {}
    for a in arms:  # in rank order
        picks.setdefault(a["label"].split(":", 1)[0], a["label"])
    return picks


def _trace(run: RunResult) -> dict:
    path = run.dir / "trace.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _time(x: float) -> str:
    return f"{x:.0f}" if math.isfinite(x) else NEVER


def _stats(times: list[float]) -> str:
    reached = [x for x in times if math.isfinite(x)]
    if not reached:
        return f"{NEVER} (0/{len(times)})"
    sd = statistics.stdev(reached) if len(reached) > 1 else 0.0
    return f"{statistics.fmean(reached):.0f} ± {sd:.0f} ({len(reached)}/{len(times)})"


def _num(x: float, digits: int) -> str:
    return "—" if math.isnan(x) else f"{x:.{digits}f}"


def markdown(arms: list[dict], targets: list[float], machine: dict | None = None) -> str:
    """The page's tables (arms, then their traces; for a tuning sweep, each method's chosen trial) and the machine
    time, as markdown."""
    head = ["rank", "arm"]
    for t in targets:
        head += [f"{t:g}: each seed (s)", f"{t:g}: mean ± sd (k/n)"]
    head += ["best acc", f"seeds won at {max(targets):g}"]
    body = []
    for a in arms:
        row = [str(a["rank"]), a["label"]]
        for t in targets:
            row += [" · ".join(_time(x) for x in a["times"][t]), _stats(a["times"][t])]
        sd = statistics.stdev(a["best"]) if len(a["best"]) > 1 else 0.0
        row += [f"{statistics.fmean(a['best']):.4f} ± {sd:.4f}", f"{a['won']}/{len(a['seeds'])}"]
        body.append(row)
    thead = ["arm", "aggregations / 100 s", "mean staleness", "weighted staleness", "waiting on β", "machine time (s)"]
    tbody = [[a["label"], _num(a["trace"]["aggregations_per_100s"], 1), _num(a["trace"]["mean_staleness"], 2),
              _num(a["trace"]["weighted_staleness"], 2),
              "—" if math.isnan(a["trace"]["waiting_share"]) else f"{100 * a['trace']['waiting_share']:.1f}%",
              f"{a['wall_s']:.0f}"] for a in arms]
    parts = [_table(head, body), _table(thead, tbody)]
    if any(":" in a["label"] for a in arms):  # a tuning sweep's trials: each method's choice
        parts.append(_table(["method", "tuned setting (its first trial in rank order)", "rank"],
                            [[m, label.split(":", 1)[1] if ":" in label else "(its only arm)",
                              str(next(a["rank"] for a in arms if a["label"] == label))]
                             for m, label in chosen(arms).items()]))
    if machine:
        parts.append(f"Runs: {machine['runs']} of the sweep's {machine['runs_in_sweep']}, made at "
                     f"{_commits_line(machine['run_commits'])}; machine time {machine['machine_time_s']:.0f} s (the "
                     f"runs' wall times summed).")
    return "\n\n".join(parts) + "\n"


def _table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def figure(arms: list[dict], targets: list[float]):
    """Time to each target, a panel per target: each seed a dot, "never" a cross at the panel's right edge
    (``edge``, 5% past the largest budget ``run.max_time``, or where a run without one stopped); the arms top to bottom in
    rank order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    reached = [x for a in arms for x in a["ends"] + [y for t in targets for y in a["times"][t]] if math.isfinite(x)]
    edge = 1.05 * max(reached) if reached and max(reached) > 0 else 1.0
    fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets), 0.45 * len(arms) + 1.6), sharey=True,
                             squeeze=False)
    ys = list(range(len(arms)))[::-1]
    for ax, t in zip(axes[0], targets):
        for y, a in zip(ys, arms):
            got = [x for x in a["times"][t] if math.isfinite(x)]
            never = sum(not math.isfinite(x) for x in a["times"][t])
            ax.scatter(got, [y] * len(got), s=22, color="tab:blue", zorder=3)
            if never:
                ax.scatter([edge] * never, [y] * never, marker="x", s=40, color="tab:red", zorder=3)
        ax.axvline(edge, color="0.8", lw=0.8)
        ax.set_xlim(0, edge * 1.04)
        ax.set_title(f"to {t:g}")
        ax.set_xlabel("virtual time (s); × = never (within the budget)")
        ax.grid(axis="x", color="0.92")
    axes[0][0].set_yticks(ys, [a["label"] for a in arms])
    fig.tight_layout()
    return fig


def plot(arms: list[dict], targets: list[float], path: Path) -> Path:
    """:func:`figure` written to ``path``."""
    import matplotlib.pyplot as plt
    fig = figure(arms, targets)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_leaderboard(paths, out: str | Path, targets: list[float]) -> dict:
    """``leaderboard.md`` (the tables) and ``leaderboard.png`` (the figure) of the runs under ``paths`` into
    ``out``; the machine line from the first path's ``leaderboard.json`` where an extract has one."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = find_runs(paths)
    if not runs:
        raise FileNotFoundError(f"no finished runs under {', '.join(map(str, paths))}")
    arms = rows(runs, targets)
    meta = Path(paths[0]) / "leaderboard.json"
    text = markdown(arms, targets, json.loads(meta.read_text()) if meta.exists() else None)
    (out / "leaderboard.md").write_text(text)
    png = plot(arms, targets, out / "leaderboard.png")
    return {"markdown": text, "files": {"leaderboard.md": out / "leaderboard.md", "leaderboard.png": png}}


def command(args, targets: list[float] | None) -> int:
    """``seafl report --extract OUT`` and ``seafl report --leaderboard`` (cli.py's report command hands them here)."""
    if args.extract:
        if len(args.dirs) != 1 or args.leaderboard:
            raise ConfigError("--extract takes one sweep dir and no --leaderboard; extract first, then report the "
                              "extract with --leaderboard")
        written = extract(args.dirs[0], args.extract, args.commit)
        print(f"extracted {len(written)} finished run(s) of {args.dirs[0]} into {args.extract}", file=sys.stderr)
        return 0
    from seafl_dist.report.build import default_targets
    out = Path(args.out) if args.out else Path(args.dirs[0])
    result = write_leaderboard(args.dirs, out, targets or default_targets(args.dirs, find_runs(args.dirs)))
    print(result["markdown"])
    print("wrote " + ", ".join(str(p) for p in result["files"].values()), file=sys.stderr)
    return 0
