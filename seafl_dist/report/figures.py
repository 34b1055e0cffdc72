"""The paper's figures of a report, each as PNG, PDF (vector, for papers) and the CSV of what it plots.

- :func:`plot_accuracy_vs_time`: one curve per grid point: the mean test accuracy over its seeds
  on a common time grid (a seed's curve held at its last value after its run ends) with a shaded
  min–max band; per-seed curves faint on request. Targets are dashed lines, labelled on the right
  without overlap. The time axis runs to the end of the longest run, so every run's end shows, or to
  ``until``; log-x on request. Beside it, when an arm's mean reaches the targets, a close-up panel of
  the same curves from a little below the lowest target, up to where the slowest arm's mean reaches
  the highest target, plus 10% (the arms that converge differ there, a few points apart at the top of
  a 0–1 axis): only when some arm's mean reaches the lowest target within that range and, for accuracy,
  the close-up would start at 50% or above (with the default targets 0.5, 0.7, 0.9 it would start at
  30%: no close-up). Arms whose means coincide share one line and one legend entry naming them all; a run
  that diverged is marked with a cross where it did, and where runs end at different times a bar marks
  where each run ends before the last (report/curves.py).
- :func:`plot_time_to_target`: per target a panel, per arm a row: each seed a dot, the mean over
  the seeds that reached the target a bar, a seed that never did a cross in the "never" strip.
- ``report/value_plots.py``: time to target against a swept number (K, β, ...), one line per algorithm.

Every function takes the report's groups (``tables.group_runs``: grid point → its seeds' runs) and
returns the matplotlib Figure it saved (tests read it). Arms are named by their sweep point's label where the
sweep file gave one, else by ``labels.py``, which styles them.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from seafl_dist.report.curves import (DIVERGED, draw_curves, ended, joint_label, mark_divergence, mark_ends,
                                      mean_curve, run_end, same_curves, time_axis_end, zoom_range)
from seafl_dist.report.labels import figure_title, reader_labels, styles
from seafl_dist.report.metric import Metric

FONTS = {"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "legend.fontsize": 9.5, "legend.title_fontsize": 9.5,
         "xtick.labelsize": 10, "ytick.labelsize": 10, "pdf.fonttype": 42, "svg.fonttype": "none"}
NEVER = "never"
TTT_CAPTION = "time to target: dots = seeds, × = never;\nbar = mean of the seeds that reached it"  # two lines: a
# two-target figure is ~5.5 in wide, narrower than the caption on one line at 10 pt


def paper_style():
    """Font sizes that stay readable when a figure 5.2 in wide is printed a column wide (about 3.4 in:
    11 pt → 7 pt, the legend's 9.5 pt → 6 pt)."""
    return rc_context(FONTS)


def new_figure(figsize) -> Figure:
    """A figure on an Agg canvas (no display, no pyplot state), laid out by constrained layout."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path, rows: list[dict] | None = None) -> Path:
    """``path`` (PNG), the same stem as PDF, and as CSV ``rows`` when given; returns the PNG's path."""
    path = Path(path)
    with paper_style():
        fig.savefig(path, dpi=150)
        fig.savefig(path.with_suffix(".pdf"))
    if rows is not None:
        write_rows(path.with_suffix(".csv"), rows)
    return path


def write_rows(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows({k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in r.items()} for r in rows)


def point_label(group) -> str | None:
    """The label a sweep file gave the group's point (``points: [{label: stalebuff, ...}]``), as the tables
    name it; None for a point named from its keys (``buffer_size=10``) or a run outside a sweep."""
    label = group.runs[0].label
    return label if label and "=" not in label and all(r.label == label for r in group.runs) else None


def arms(groups) -> tuple[list[str], list[dict]]:
    """(labels, styles) of the groups, in their order: a point's own label where the sweep file gave one, else
    the reader's label from the keys that vary; the sweep's name added where two sweeps hold the same
    grid point."""
    configs = [g.config for g in groups]
    labels = [point_label(g) or lab for g, lab in zip(groups, reader_labels(configs))]
    labels = [f"{lab} ({g.sweep})" if g.sweep and labels.count(lab) > 1 else lab for lab, g in zip(labels, groups)]
    return labels, styles(configs)


def title_of(groups, width: int = 60) -> str:
    swept = {k for g in groups for r in g.runs for k in r.point}  # the keys the sweeps set (sweep.json)
    return wrap(figure_title([g.config for g in groups], [len(g.runs) for g in groups], swept), width)


def wrap(text: str, width: int = 42) -> str:
    """Break a label or title at its ", " parts into lines of at most ``width`` characters where it can
    (a long one ran off the figure's edge); a part longer than that keeps a line of its own."""
    lines: list[str] = []
    for part in text.split(", "):
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += ", " + part
        else:
            lines.append(part)
            if len(lines) > 1:
                lines[-2] += ","
    return "\n".join(lines)


def seeds_caption(groups) -> str:
    n = sorted({len(g.runs) for g in groups})
    if n == [1]:
        return "one seed per arm"
    count = str(n[0]) if len(n) == 1 else f"{n[0]}–{n[-1]}"
    return f"mean of {count} seeds; band: min–max"


def legend_columns(labels: list[str]) -> int:
    """As many legend columns as the longest label lets fit in a 5.2 in wide figure."""
    longest = max((len(line) for x in labels for line in wrap(x).split("\n")), default=0)
    return 3 if longest <= 14 else 2 if longest <= 26 else 1


def label_targets(fig: Figure, axes: list, targets: list[float], metric: Metric = Metric()) -> None:
    """Dashed target lines on every panel, labelled at each panel's right edge and pushed apart until no two
    labels of a panel overlap."""
    texts = {}
    for ax in axes:
        for t in sorted(targets):
            ax.axhline(t, ls="--", lw=0.8, color="0.45", zorder=1)
        lo, hi = ax.get_ylim()
        texts[ax] = [(t, ax.annotate(f"{t:.0%}" if metric.is_accuracy else f"{t:g}", xy=(1.0, t), xycoords=("axes fraction", "data"), xytext=(3, 0),
                                     textcoords="offset points", va="center", fontsize=9.5, color="0.3"))
                     for t in sorted(targets) if lo <= t <= hi]
    if not any(texts.values()):
        return
    fig.canvas.draw()  # lay the figure out once, then freeze it so the offsets below stay true
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    for ax, labelled in texts.items():
        if not labelled:
            continue
        gap = max(tx.get_window_extent(renderer).height for _, tx in labelled) * 1.15 * 72 / fig.dpi  # in points
        placed = None
        for t, tx in labelled:  # bottom up: each label at its line, or just above the label below it
            y = ax.transData.transform((0, t))[1] * 72 / fig.dpi
            placed = y if placed is None else max(y, placed + gap)
            tx.set_position((3, placed - y))


def plot_accuracy_vs_time(groups, targets, path: str | Path, *, until: float | None = None, log_x: bool = False,
                          seed_curves: bool = False, title: str | None = None, zoom: bool = True,
                          metric: Metric = Metric()) -> Figure:
    """The mean of the target metric (test accuracy by default) over seeds against virtual time, one curve and
    band per grid point (see module doc). The panel runs to the end of the longest run (or ``until``). With
    ``zoom`` (the default) and an arm that reaches the targets, a second panel beside it shows the same curves
    close up around the targets."""
    labels, looks = arms(groups)
    curves = [mean_curve(g.runs, metric.name) for g in groups]
    near = until if until is not None else time_axis_end(curves, targets, metric.mode)  # the close-up's range
    full = until if until is not None else run_end(curves)  # every run's end shows
    close_up = zoom_range(curves, targets, near, metric) if zoom else None
    drawn = same_curves(curves)  # arms whose means coincide are drawn once, their legend entry naming all
    shown = {i: joint_label(labels, i, hidden, wrap) for i, hidden in drawn.items()}
    rows = [{"label": label, "point": g.label, "seeds": len(g.runs), "time": float(t), "mean": float(m),
             "min": float(lo), "max": float(hi)}
            for g, label, c in zip(groups, labels, curves)
            for t, m, lo, hi in zip(c["time"], c["mean"], c["min"], c["max"])]
    with paper_style():
        ncol = legend_columns([labels[i] for i in drawn]) * (2 if close_up else 1)
        legend_rows = math.ceil(sum(x.count("\n") + 1 for x in shown.values()) / ncol)
        fig = new_figure(figsize=(9.6 if close_up else 5.2, 3.9 + 0.24 * legend_rows))
        axes = list(fig.subplots(1, 2, width_ratios=(1, 1), gridspec_kw={"wspace": 0.12}) if close_up
                    else [fig.subplots()])
        first = min((float(t) for c in curves for t in c["time"] if t > 0), default=1.0)  # log-x starts here
        diverged = any_ended = False
        for ax, ylim, end in zip(axes, [(0.0, 1.0) if metric.is_accuracy else None, close_up], [full, near]):
            draw_curves(ax, groups, shown, looks, curves, end, seed_curves, drawn)
            diverged = mark_divergence(ax, groups, curves, drawn) or diverged
            any_ended = mark_ends(ax, groups, curves, drawn, looks) or any_ended
            ax.set_xlabel("virtual time (s)" + (", log scale" if log_x else ""))
            if ylim is not None:  # another metric: the range its curves span
                ax.set_ylim(*ylim)
            if log_x:
                ax.set_xscale("log")
                ax.set_xlim(first, max(end, first * 10))
            else:
                ax.set_xlim(0, max(end, 1e-9))
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(metric.label if metric.is_accuracy else f"{metric.label} ({metric.direction})")
        heading = title if title is not None else title_of(groups, 100 if close_up else 60)  # over both panels
        if close_up:
            fig.suptitle(heading)
            axes[1].set_title(f"close-up: accuracy from {close_up[0]:.0%}" if metric.is_accuracy else
                              f"close-up: {metric.name} {close_up[0]:.3g} to {close_up[1]:.3g}", fontsize=10)
        else:
            axes[0].set_title(heading)
        if groups:  # under the axes, where no curve can hide beneath it
            handles, names = axes[0].get_legend_handles_labels()
            if diverged:
                handles.append(Line2D([], [], **DIVERGED))
                names.append("where a run diverged")
            if any_ended:
                handles.append(Line2D([], [], **ended("white")))
                names.append("where a run ends")
            fig.legend(handles, names, title=seeds_caption(groups), frameon=False,
                       loc="outside lower center", ncol=min(ncol, len(names)))
        label_targets(fig, axes, targets, metric)
    save(fig, Path(path), rows)
    return fig


def never_axis(ax, finite: list[float], *, axis: str = "x") -> float:
    """Room for "never" past the largest finite time: returns the position drawn as "never", sets ticks and limits."""
    top = max(finite, default=1.0) or 1.0
    never, stop = top * 1.3, top * 1.42
    ticks = [t for t in MaxNLocator(4).tick_values(0, top) if 0 <= t <= top]
    span, lim, tick = ((ax.axvspan, ax.set_xlim, ax.set_xticks) if axis == "x" else
                       (ax.axhspan, ax.set_ylim, ax.set_yticks))
    span(top * 1.18, stop, color="0.92", zorder=0)
    lim(0, stop)
    tick(ticks + [never], [f"{t:g}" for t in ticks] + [NEVER])
    return never


def plot_time_to_target(groups, targets, path: str | Path, *, title: str | None = None,
                        metric: Metric = Metric()) -> Figure:
    """Per target a panel; per arm a row with each seed's time as a dot and the mean as a bar; "never" at the end."""
    labels, looks = arms(groups)
    rows = []
    with paper_style():
        lines = [wrap(x).count("\n") + 1 for x in labels]
        fig = new_figure(figsize=(max(4.2, 2.1 * len(targets) + 0.09 * min(42, max(map(len, labels), default=0))),
                                  1.3 + 0.3 * sum(lines)))
        axes = np.atleast_1d(fig.subplots(1, max(1, len(targets)), sharey=True, squeeze=False)[0])
        for ax, target in zip(axes, targets):
            times = [[r.ttt(target) for r in g.runs] for g in groups]
            never = never_axis(ax, [t for ts in times for t in ts if math.isfinite(t)])
            for y, (g, label, look, ts) in enumerate(zip(groups, labels, looks, times)):
                hit = [t for t in ts if math.isfinite(t)]
                mean = float(np.mean(hit)) if hit else math.inf
                if hit:
                    ax.barh(y, mean, height=0.6, color=look["color"], alpha=0.45, lw=0)
                missed = len(ts) - len(hit)  # each seed that never reached it is a cross, whatever the others did
                for xs, marker in ((hit, look["marker"]), ([never] * missed, "X")):
                    if xs:
                        ax.scatter(xs, [y] * len(xs), s=16, zorder=3, color=look["color"], edgecolor="black",
                                   linewidths=0.4, marker=marker)
                rows += [{"label": label, "point": g.label, "target": target, "seed": r.seed, "time": t,
                          "mean_of_reached": mean, "reached": len(hit), "seeds": len(ts)} for r, t in zip(g.runs, ts)]
            ax.set_title(f"to {metric.target_text(target)}")
            ax.set_xlabel("virtual time (s)")
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(range(len(groups)), [wrap(x) for x in labels])
        axes[0].set_ylim(len(groups) - 0.5, -0.5)
        fig.suptitle((title if title is not None else title_of(groups)) + "\n" + TTT_CAPTION, fontsize=10)
    save(fig, Path(path), rows)
    return fig
