"""``participation.png``: each device's share of the aggregation weight against its speed (report/participation.py).

One panel per arm (a single run: one panel). Each device of each seed is a dot at (its mean job duration, its weight
share). The speed quartiles are marked: dashed boundaries, Q2 and Q4 shaded, and per quartile a solid segment at the
mean share of one of its devices; the panel's heading gives each quartile's summed share, fastest first. Over seeds
these are means, seeds matched by quartile (device ids are not the same devices across seeds). A dotted line is an
equal say: 1 / the devices drawn. A device without a finished job has no speed and is not drawn; the heading says how
many. A run whose weights the trace withholds (SEAFL's and SEAFL²'s under DP without diagnostics: blank in
participation.csv) has no share to draw: none of its devices is drawn, never at 0, and the heading says so. The duration axis is logarithmic when the slowest device is over 10 times slower than the fastest.

:func:`write_participation` writes, beside ``participation.png``: ``participation.pdf``, ``participation.csv`` (one
row per device and run, report/participation.py's columns) and ``participation_quartiles.csv`` (per arm and quartile,
the means over seeds the segments and headings show).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from seafl_dist.report.figures import arms, new_figure, paper_style, save, title_of, wrap, write_rows
from seafl_dist.report.participation import COLUMNS, arm_quartiles, dp_sgd_epsilon, run_participation, run_quartiles
from seafl_dist.report.sinks import read_events

LOG_RATIO = 10.0  # slowest / fastest mean job duration above which the duration axis is logarithmic
SHADE = "0.93"
HEADROOM = 1.2  # the share axis runs to 1.2 × the largest share


def write_participation(groups, out: Path) -> dict:
    """``participation.{png,pdf,csv}`` and ``participation_quartiles.csv`` of the groups' runs that have a trace
    ({} when none has): {file name: path}."""
    rows, quartiles, panels = participation_of(groups)
    if not panels:
        return {}
    out = Path(out)
    plot_participation(panels, title_of(groups, 1000), out / "participation.png", rows)
    write_rows(out / "participation_quartiles.csv", quartiles)
    return {**{f"participation.{ext}": out / f"participation.{ext}" for ext in ("png", "pdf", "csv")},
            "participation_quartiles.csv": out / "participation_quartiles.csv"}


def participation_of(groups) -> tuple[list[dict], list[dict], list[tuple]]:
    """(participation.csv's rows, participation_quartiles.csv's rows, one panel per arm with a trace:
    (its label, its style, its runs' device rows, its quartiles' means over seeds))."""
    labels, looks = arms(groups)
    rows, quartiles, panels = [], [], []
    for g, label, look in zip(groups, labels, looks):
        per_run = []
        for r in g.runs:
            if (r.dir / "events.jsonl").exists():
                devices = run_participation(read_events(r.dir / "events.jsonl"), r.config, dp_sgd_epsilon(r.summary))
                per_run.append([{**d, "label": label, "point": g.label, "run": r.name, "seed": r.seed} for d in devices])
        if not per_run:
            continue
        summary = arm_quartiles([run_quartiles(devices) for devices in per_run])
        rows += [{c: d.get(c) for c in COLUMNS} for devices in per_run for d in devices]
        quartiles += [{"label": label, "point": g.label, **q} for q in summary]
        panels.append((label, look, per_run, summary))
    return rows, quartiles, panels


def _heading(label: str, per_run: list, summary: list[dict]) -> str:
    shares = [q["share_mean"] for q in summary]
    lines = [wrap(label, 40)]
    if all(s is not None for s in shares):
        lines.append("Q1–Q4 share: " + " · ".join(f"{s:.0%}" for s in shares))
    withheld = sum(any(d["weight"] is None for d in devices) for devices in per_run)
    if withheld:
        lines.append(wrap(f"weights withheld under DP ({withheld} of {len(per_run)} runs): not drawn", 40))
    never = sum(d["jobs_started"] == 0 for devices in per_run for d in devices)
    unfinished = sum(d["jobs_started"] > 0 and d["mean_job_s"] is None for devices in per_run for d in devices)
    if never or unfinished:
        parts = [f"{never} never ran" if never else "", f"{unfinished} finished no job" if unfinished else ""]
        seeds = f" ({len(per_run)} seeds)" if len(per_run) > 1 else ""
        lines.append(wrap("not drawn: " + ", ".join(p for p in parts if p) + seeds, 40))
    return "\n".join(lines)


def _panel(ax, label: str, look: dict, per_run: list, summary: list[dict]) -> None:
    for devices in per_run:
        drawn = [d for d in devices if d["mean_job_s"] is not None and d["weight_share"] is not None]
        ax.scatter([d["mean_job_s"] for d in drawn], [d["weight_share"] for d in drawn], s=16, lw=0.3,
                   color=look["color"], edgecolor="black", marker=look["marker"],
                   alpha=0.85 if len(per_run) == 1 else 0.5, zorder=3)
    drawn_counts = [sum(d["mean_job_s"] is not None for d in devices) for devices in per_run]
    equal = [1 / n for n, devices in zip(drawn_counts, per_run) if n and any(d["weight_share"] is not None
                                                                             for d in devices)]
    if equal:
        ax.axhline(float(np.mean(equal)), ls=":", lw=1.0, color="0.35", zorder=2)
    if summary[0]["seeds"]:
        for q in summary:
            lo, hi = q["job_s_from"], q["job_s_to"]
            if q["quartile"] % 2 == 0:
                ax.axvspan(lo, hi, color=SHADE, lw=0, zorder=0)
            if q["quartile"] < 4:
                ax.axvline(hi, ls="--", lw=0.8, color="0.45", zorder=1)
            if q["device_share_mean"] is not None:
                ax.hlines(q["device_share_mean"], lo, hi, color="black", lw=2.0, zorder=4)
                ax.hlines(q["device_share_mean"], lo, hi, color=look["color"], lw=1.2, zorder=4)
    ax.set_title(_heading(label, per_run, summary), fontsize=9.5)
    ax.grid(alpha=0.3)


def _quartile_names(ax, summary: list[dict], log: bool) -> None:
    """Q1..Q4 at the top of each quartile wide enough to hold it (after the axis' limits are final)."""
    lo, hi = ax.get_xlim()
    scale = (lambda x: math.log(max(x, 1e-12))) if log else (lambda x: x)
    span = scale(hi) - scale(lo) or 1.0
    for q in summary:
        a, b = q["job_s_from"], q["job_s_to"]
        if a is None or (scale(b) - scale(a)) / span < 0.05:
            continue
        mid = math.sqrt(a * b) if log and a > 0 else (a + b) / 2
        ax.text(mid, 0.97, f"Q{q['quartile']}", transform=ax.get_xaxis_transform(), ha="center", va="top",
                fontsize=8.5, color="0.3", zorder=5)


def plot_participation(panels: list, title: str, path: str | Path, rows: list[dict]) -> Figure:
    """The figure of :func:`write_participation`'s panels ((label, style, per-run device rows, arm quartiles) per
    arm), saved as PNG and PDF, ``rows`` as its CSV."""
    speeds = [d["mean_job_s"] for _, _, per_run, _ in panels for devices in per_run for d in devices
              if d["mean_job_s"] is not None]
    top = max((d["weight_share"] for _, _, per_run, _ in panels for devices in per_run for d in devices
               if d["weight_share"] is not None), default=0.0)
    log = bool(speeds) and min(speeds) > 0 and max(speeds) / min(speeds) > LOG_RATIO
    seeds = sorted({len(per_run) for _, _, per_run, _ in panels})
    ncol = min(len(panels), 3)
    nrow = math.ceil(len(panels) / ncol)
    with paper_style():
        fig = new_figure((max(5.2, 3.7 * ncol), 1.6 + 3.1 * nrow))
        axes = fig.subplots(nrow, ncol, sharex=True, sharey=True, squeeze=False).ravel()
        for ax, (label, look, per_run, summary) in zip(axes, panels):
            _panel(ax, label, look, per_run, summary)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        for i, ax in enumerate(axes[:len(panels)]):
            if log:  # ticks at 1, 2, 5, 10, ... written as plain numbers
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.xaxis.set_minor_locator(NullLocator())
            ax.set_ylim(0, HEADROOM * max(top, 1e-9))  # room for the quartiles' names above every dot
            if i % ncol == 0:
                ax.set_ylabel("share of the aggregation weight")
            if i + ncol >= len(panels):
                ax.set_xlabel("mean job duration (s)" + (", log scale" if log else "") + "\n← faster · slower →")
                ax.xaxis.set_tick_params(labelbottom=True)
        for ax, (_, _, _, summary) in zip(axes, panels):
            _quartile_names(ax, summary, log)
        many = seeds != [1]
        handles = [Line2D([], [], ls="none", marker="o", color="0.5", mec="black", mew=0.3,
                          label="a device (each seed)" if many else "a device"),
                   Line2D([], [], color="black", lw=2.0, label="a device's mean share\nin the quartile"),
                   Line2D([], [], color="0.45", ls="--", lw=0.8, label="quartile boundary"),
                   Patch(facecolor=SHADE, label="Q2 and Q4\n(Q1 fastest)"),
                   Line2D([], [], color="0.35", ls=":", lw=1.0, label="equal share:\n1 / devices drawn")]
        caption = f"mean over {seeds[0] if len(seeds) == 1 else f'{seeds[0]}–{seeds[-1]}'} seeds, matched by " \
                  "speed quartile" if many else None
        fig.legend(handles=handles, loc="outside lower center", ncol={1: 2, 2: 3}.get(ncol, 5), frameon=False,
                   title=caption)
        fig.suptitle(wrap(title, 60 * ncol) + "\nshare of the aggregation weight against speed", fontsize=10)
    save(fig, Path(path), rows)
    return fig
