"""The device evaluation in a report (report/device_eval.py): how each device's own held-out data fares at the end.

For each run with ``device_metrics.csv``, its last device evaluation (the final model) joined with the device's speed
and speed quartile from the run's trace (report/participation.py), for the run's target metric (accuracy by default).
Per arm (a grid point; its seeds' means, seeds matched by quantile or by speed quartile, since device ids are not the
same devices across seeds):

- ``device_eval_cdf.png`` (``.pdf``, ``.csv``): the distribution of the devices' final values, one CDF per arm: the
  mean over seeds of each quantile (the seeds' CDFs faint beneath); the CSV holds the mean curve's quantiles.
- ``device_eval_vs_speed.png`` (``.pdf``, ``.csv``): each device's final value against its mean job duration, one
  panel per arm, the speed quartiles marked and each quartile's mean value a segment; the CSV holds every device of
  every run (``label, point, run, seed, device, samples, value, mean_job_s, speed_quartile, weight_share``).
- ``device_eval.csv`` and report.md's "Devices' own held-out data" table: per arm the final ``p10``, ``p50``, the
  worst 10%'s mean (device_summary.csv's), the mean per speed quartile Q1 (fastest) to Q4, and the Q4 − Q1 gap,
  each a mean over seeds (± the seeds' std in report.md).

Devices without a held-out sample, or without a finished job (no speed), are left out of what needs them; the CSV
keeps them with blanks.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from seafl_dist.report.device_eval import read_device_metrics, read_device_summary
from seafl_dist.report.figures import arms, new_figure, paper_style, save, title_of, wrap, write_rows
from seafl_dist.report.participation import QUARTILES, quartile_bounds, run_participation
from seafl_dist.report.sinks import read_events

LEVELS = np.linspace(0.0, 1.0, 101)
TABLE = ["p10", "p50", "worst10_mean", "q1_mean", "q2_mean", "q3_mean", "q4_mean", "q4_minus_q1"]


def final_devices(run) -> tuple[list[dict], dict | None, list[float]]:
    """(the run's devices at its last device evaluation, joined with their speed; that evaluation's summary row of
    the target metric; the run's speed quartile boundaries, over all its devices), or ([], None, []) for a run
    without device evaluation."""
    name = run.metric.name
    rows = read_device_metrics(run.dir)
    if not rows or name not in rows[0]:
        return [], None, []
    last = max(r["version"] for r in rows)
    speed = {}
    if (run.dir / "events.jsonl").exists():
        speed = {p["device"]: p for p in run_participation(read_events(run.dir / "events.jsonl"), run.config)}
    devices = [{"device": r["device"], "samples": r["samples"], "value": r[name] if r["samples"] else None,
                "mean_job_s": speed.get(r["device"], {}).get("mean_job_s"),
                "speed_quartile": speed.get(r["device"], {}).get("speed_quartile"),
                "weight_share": speed.get(r["device"], {}).get("weight_share")} for r in rows if r["version"] == last]
    summary = next((s for s in read_device_summary(run.dir) if s["version"] == last and s["metric"] == name), None)
    return devices, summary, quartile_bounds(list(speed.values()))


def _finite(devices: list[dict]) -> list[float]:
    return [d["value"] for d in devices if d["value"] is not None and math.isfinite(d["value"])]


def run_figures(devices: list[dict], summary: dict | None) -> dict:
    """One run's table entries: its summary's p10, p50, worst-10% mean, and the mean value per speed quartile."""
    out = {k: (summary or {}).get(k) for k in ("p10", "p50", "worst10_mean")}
    for q in QUARTILES:
        mine = _finite([d for d in devices if d["speed_quartile"] == q])
        out[f"q{q}_mean"] = statistics.fmean(mine) if mine else None
    out["q4_minus_q1"] = (out["q4_mean"] - out["q1_mean"]) if None not in (out["q4_mean"], out["q1_mean"]) else None
    return out


def _mean_std(values: list) -> tuple[float | None, float | None]:
    got = [v for v in values if v is not None]
    if not got:
        return None, None
    return statistics.fmean(got), statistics.stdev(got) if len(got) > 1 else 0.0


def device_eval_of(groups) -> list[dict]:
    """Per arm with device evaluation: its label, style, runs' devices, runs' figures and the means over seeds."""
    labels, looks = arms(groups)
    out = []
    for g, label, look in zip(groups, labels, looks):
        runs = [(r, *final_devices(r)) for r in g.runs]
        runs = [run for run in runs if run[1]]  # (run, devices, summary, quartile bounds)
        if not runs:
            continue
        figures = [run_figures(devices, summary) for _, devices, summary, _ in runs]
        means = {k: _mean_std([f[k] for f in figures]) for k in TABLE}
        out.append({"label": label, "point": g.label, "look": look, "runs": runs, "means": means,
                    "metric": runs[0][0].metric})
    return out


def write_device_eval(groups, out: Path) -> tuple[dict, str]:
    """The figures and device_eval.csv of the groups' runs with device evaluation ({} and '' when none has), and
    report.md's section."""
    panels = device_eval_of(groups)
    if not panels:
        return {}, ""
    out = Path(out)
    title = title_of(groups, 1000)
    plot_cdf(panels, title, out / "device_eval_cdf.png")
    plot_vs_speed(panels, title, out / "device_eval_vs_speed.png")
    write_rows(out / "device_eval.csv", [{"label": p["label"], "point": p["point"], "seeds": len(p["runs"]),
                                          **{f"{k}_{s}": v for k in TABLE for s, v in zip(("mean", "std"),
                                                                                       p["means"][k])}}
                                         for p in panels])
    files = {f"{stem}.{ext}": out / f"{stem}.{ext}" for stem in ("device_eval_cdf", "device_eval_vs_speed")
             for ext in ("png", "pdf", "csv")}
    return {**files, "device_eval.csv": out / "device_eval.csv"}, markdown(panels)


def markdown(panels: list[dict]) -> str:
    metric = panels[0]["metric"]
    head = ["point", "seeds", "p10", "p50", "worst 10%", "Q1 (fastest)", "Q2", "Q3", "Q4 (slowest)", "Q4 − Q1"]

    def cell(ms) -> str:
        m, s = ms
        return "—" if m is None else f"{m:.4f}" + (f" ± {s:.4f}" if s else "")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join([p["label"], str(len(p["runs"]))] + [cell(p["means"][k]) for k in TABLE]) + " |"
              for p in panels]
    note = (f"Each device's {metric.label} on its own held-out data at the run's last device evaluation (the final "
            "model): the p10, median and mean of the worst 10% of devices, and the mean over the devices of each speed "
            "quartile (mean job duration; Q1 fastest); mean ± std over seeds.")
    return "\n\n".join(["## Devices' own held-out data", note, "\n".join(lines)]) + "\n"


def _axis_label(panels: list[dict]) -> str:
    metric = panels[0]["metric"]
    name = "accuracy" if metric.is_accuracy else metric.name
    return f"a device's {name} on its own held-out data (final model)"


def plot_cdf(panels: list[dict], title: str, path: Path) -> Figure:
    """Per arm, the CDF of the devices' final values: the mean over seeds of each quantile, the seeds faint."""
    rows = []
    with paper_style():
        fig = new_figure((5.2, 4.2))
        ax = fig.subplots()
        for p in panels:
            per_seed = [np.quantile(v, LEVELS) for v in (_finite(d) for _, d, _, _ in p["runs"]) if v]
            if not per_seed:
                continue
            for q in per_seed if len(per_seed) > 1 else []:
                ax.plot(q, LEVELS, color=p["look"]["color"], lw=0.6, alpha=0.3, drawstyle="steps-post")
            mean = np.mean(per_seed, axis=0)
            ax.plot(mean, LEVELS, color=p["look"]["color"], ls=p["look"].get("ls", "-"), lw=1.6,
                    drawstyle="steps-post", label=wrap(p["label"], 30))
            rows += [{"label": p["label"], "point": p["point"], "seeds": len(per_seed), "fraction_of_devices": float(f),
                      "value_mean_over_seeds": float(v)} for f, v in zip(LEVELS, mean)]
        ax.axhline(0.1, ls=":", lw=0.8, color="0.45", label="p10: a tenth of the devices below")
        ax.set_xlabel(_axis_label(panels))
        ax.set_ylabel("fraction of devices at or below it")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", frameon=False)
        seeds = sorted({len(p["runs"]) for p in panels})
        caption = "" if seeds == [1] else "\nmean over seeds of each quantile; faint: each seed"
        fig.suptitle(wrap(title, 60) + f"\ndevices' own held-out data at the end{caption}", fontsize=10)
    save(fig, path, rows)
    return fig


def plot_vs_speed(panels: list[dict], title: str, path: Path) -> Figure:
    """Per arm a panel: each device's final value against its mean job duration, the quartiles' means as segments."""
    rows = [{"label": p["label"], "point": p["point"], "run": r.name, "seed": r.seed, **d}
            for p in panels for r, devices, _, _ in p["runs"] for d in devices]
    speeds = [d["mean_job_s"] for d in rows if d["mean_job_s"] is not None]
    log = bool(speeds) and min(speeds) > 0 and max(speeds) / min(speeds) > 10
    ncol = min(len(panels), 3)
    nrow = math.ceil(len(panels) / ncol)
    with paper_style():
        fig = new_figure((max(5.2, 3.7 * ncol), 1.6 + 3.1 * nrow))
        axes = fig.subplots(nrow, ncol, sharex=True, sharey=True, squeeze=False).ravel()
        for ax, p in zip(axes, panels):
            _speed_panel(ax, p)
            if log:  # ticks at 1, 2, 5, 10, ... written as plain numbers, as participation.png has them
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.xaxis.set_minor_locator(NullLocator())
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        fig.supylabel(_axis_label(panels), fontsize=11)  # once: a label per row ran into the next row's
        for i, ax in enumerate(axes[:len(panels)]):
            if i + ncol >= len(panels):
                ax.set_xlabel("mean job duration (s)" + (", log scale" if log else "") + "\n← faster · slower →")
                ax.xaxis.set_tick_params(labelbottom=True)
        handles = [Line2D([], [], ls="none", marker="o", color="0.5", mec="black", mew=0.3, label="a device"),
                   Line2D([], [], color="black", lw=2.0, label="quartile's mean"),
                   Line2D([], [], color="0.45", ls="--", lw=0.8, label="quartile boundary")]
        fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False)
        fig.suptitle(wrap(title, 60 * ncol) + "\na device's own held-out data at the end against its speed",
                     fontsize=10)
    save(fig, path, rows)
    return fig


def _speed_panel(ax, p: dict) -> None:
    look, per_run = p["look"], p["runs"]
    for _, devices, _, _ in per_run:
        drawn = [d for d in devices if d["mean_job_s"] is not None and d["value"] is not None]
        ax.scatter([d["mean_job_s"] for d in drawn], [d["value"] for d in drawn], s=16, lw=0.3, color=look["color"],
                   edgecolor="black", marker=look["marker"], alpha=0.85 if len(per_run) == 1 else 0.5, zorder=3)
    bounds = [b for _, _, _, b in per_run if b]
    speeds = [d["mean_job_s"] for _, devices, _, _ in per_run for d in devices if d["mean_job_s"] is not None]
    if bounds and speeds:
        edges = [min(speeds), *np.mean(bounds, axis=0).tolist(), max(speeds)]
        for q in QUARTILES:
            if q < 4:
                ax.axvline(edges[q], ls="--", lw=0.8, color="0.45", zorder=1)
            mean = p["means"][f"q{q}_mean"][0]
            if mean is not None:
                ax.hlines(mean, edges[q - 1], edges[q], color="black", lw=2.0, zorder=4)
                ax.hlines(mean, edges[q - 1], edges[q], color=look["color"], lw=1.2, zorder=4)
    gap = p["means"]["q4_minus_q1"][0]
    gap = None if gap is None else round(gap, 3) + 0.0  # + 0.0: no "-0.000"
    ax.set_title(wrap(p["label"], 40) + ("" if gap is None else f"\nQ4 − Q1: {gap:+.3f}"), fontsize=9.5)
    ax.grid(alpha=0.3)
