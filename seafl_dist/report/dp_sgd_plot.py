"""``dp_sgd_epsilon.png``: each device's record-level ε under ``train.dp_sgd`` against its speed.

One panel per arm whose runs are DP-SGD runs (summary.json's ``dp_sgd.epsilon``, privacy/record_accountant.py). Each
device of each seed is a dot at (its mean job duration, participation.csv's ``mean_job_s``; its ε). A fast device
finishes more jobs, so more of its uploads arrive and it is charged more steps: the dots tend to fall from left to
right, scattered by the shard sizes (q_k = B/n_k: a small shard's step costs more, and it has fewer of them).
The panel's heading gives the largest ε and the median over its devices; a dashed line marks the largest. A device
without a finished job has no speed and is not drawn (its ε is 0: none of its uploads arrived); the heading says how
many. The duration axis is logarithmic when the slowest device is over 10 times slower than the fastest, as
participation.png's is.

:func:`write_dp_sgd_epsilon` writes, beside ``dp_sgd_epsilon.png``: ``dp_sgd_epsilon.pdf`` and
``dp_sgd_epsilon.csv`` (one row per device and run: the arm, the run, the device, its speed and its ε).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from seafl_dist.report.figures import new_figure, paper_style, save, title_of, wrap
from seafl_dist.report.participation_plot import LOG_RATIO, participation_of

CSV = ["label", "point", "run", "seed", "device", "n_samples", "updates_accepted", "updates_rejected", "mean_job_s",
       "speed_quartile", "dp_sgd_epsilon"]


def write_dp_sgd_epsilon(groups, out: Path) -> dict:
    """``dp_sgd_epsilon.{png,pdf,csv}`` of the groups' DP-SGD runs ({} when none is one): {file name: path}."""
    _, _, panels = participation_of(groups)
    panels = [(label, look, [devices for devices in per_run if devices and devices[0]["dp_sgd_epsilon"] is not None])
              for label, look, per_run, _ in panels]
    panels = [p for p in panels if p[2]]
    if not panels:
        return {}
    out = Path(out)
    rows = [{c: d.get(c) for c in CSV} for _, _, per_run in panels for devices in per_run for d in devices]
    plot_dp_sgd_epsilon(panels, title_of(groups, 1000), out / "dp_sgd_epsilon.png", rows)
    return {f"dp_sgd_epsilon.{ext}": out / f"dp_sgd_epsilon.{ext}" for ext in ("png", "pdf", "csv")}


def _heading(label: str, per_run: list) -> str:
    eps = [d["dp_sgd_epsilon"] for devices in per_run for d in devices]
    finite = [e for e in eps if math.isfinite(e)]
    lines = [wrap(label, 40), f"max ε {max(eps):.3g} · median {statistics.median(eps):.3g}"
             + (" (σ = 0: ε = ∞)" if len(finite) < len(eps) else "")]
    unseen = sum(d["mean_job_s"] is None for devices in per_run for d in devices)
    if unseen:
        lines.append(wrap(f"not drawn: {unseen} finished no job (ε 0)", 40))
    return "\n".join(lines)


def plot_dp_sgd_epsilon(panels: list, title: str, path: str | Path, rows: list[dict]):
    """The figure of :func:`write_dp_sgd_epsilon`'s panels ((label, style, per-run device rows) per arm), saved as
    PNG and PDF, ``rows`` as its CSV; returns the Figure."""
    drawn = [d for _, _, per_run in panels for devices in per_run for d in devices if d["mean_job_s"] is not None]
    speeds = [d["mean_job_s"] for d in drawn]
    log = bool(speeds) and min(speeds) > 0 and max(speeds) / min(speeds) > LOG_RATIO
    finite = [d["dp_sgd_epsilon"] for d in drawn if math.isfinite(d["dp_sgd_epsilon"])]
    top = max(finite, default=1.0) or 1.0
    ncol = min(len(panels), 3)
    nrow = math.ceil(len(panels) / ncol)
    with paper_style():
        fig = new_figure((max(5.2, 3.7 * ncol), 1.4 + 3.1 * nrow))
        axes = fig.subplots(nrow, ncol, sharex=True, sharey=True, squeeze=False).ravel()
        for i, (ax, (label, look, per_run)) in enumerate(zip(axes, panels)):
            for devices in per_run:
                mine = [d for d in devices if d["mean_job_s"] is not None and math.isfinite(d["dp_sgd_epsilon"])]
                ax.scatter([d["mean_job_s"] for d in mine], [d["dp_sgd_epsilon"] for d in mine], s=16, lw=0.3,
                           color=look["color"], edgecolor="black", marker=look["marker"],
                           alpha=0.85 if len(per_run) == 1 else 0.5, zorder=3)
            most = max(d["dp_sgd_epsilon"] for devices in per_run for d in devices)
            if math.isfinite(most):
                ax.axhline(most, ls="--", lw=0.8, color="0.45", zorder=1)
            ax.set_title(_heading(label, per_run), fontsize=9.5)
            ax.grid(alpha=0.3)
            if log:
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.xaxis.set_minor_locator(NullLocator())
            ax.set_ylim(0, 1.15 * top)
            if i % ncol == 0:
                ax.set_ylabel("the device's ε (record level)")
            if i + ncol >= len(panels):
                ax.set_xlabel("mean job duration (s)" + (", log scale" if log else "") + "\n← faster · slower →")
                ax.xaxis.set_tick_params(labelbottom=True)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        handles = [Line2D([], [], ls="none", marker="o", color="0.5", mec="black", mew=0.3, label="a device"),
                   Line2D([], [], color="0.45", ls="--", lw=0.8, label="the largest ε")]
        fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False)
        fig.suptitle(wrap(title, 60 * ncol) + "\neach device's DP-SGD ε over its arrived jobs, against speed",
                     fontsize=10)
    save(fig, Path(path), rows)
    return fig
