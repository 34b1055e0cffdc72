"""The paper's plot of a sweep over a number: time to target against K (or β, concentration, dropout...).

A key qualifies when it is an arm key (labels.py) whose values are numbers (``null`` of a limit
is ∞) and at least two arms differ in it and nothing else: those arms form a line, one per
algorithm (and per value of any other key that varies), whether the sweep gave the key by
``--grid`` or by ``points:``. Per target a panel; each line's mean over the seeds that reached the
target, each seed a faint dot, the seeds' min–max a vertical bar; a mean of "never" sits in the
"never" strip at the top. ∞ is drawn past the largest finite value, at the axis' end, labelled "∞".
Files: ``time_to_target_vs_<key>.png`` / ``.pdf`` / ``.csv`` (the key's last part, e.g. ``buffer_size``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from seafl_dist.report.metric import Metric
from seafl_dist.report.figures import never_axis, new_figure, paper_style, save, title_of, wrap
from seafl_dist.report.labels import INFINITE_WHEN_NULL, SYMBOLS, ZERO_WHEN_NULL, reader_labels, styles, value_text, varying_keys


CAPTION = "line: mean of the seeds that reached the target; dots: seeds; bar: their min–max; hollow: never"


def _number(key: str, v) -> float | None:
    if v is None and key in INFINITE_WHEN_NULL:
        return math.inf
    if v is None and key in ZERO_WHEN_NULL:  # no dropout
        return 0.0
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def swept_lines(groups, key: str) -> list[list]:
    """Groups that differ only in ``key``, each list sorted by its value; lines of one point dropped."""
    keys = [k for k in varying_keys([g.config for g in groups]) if k != key]
    lines: dict[str, list] = {}
    for g in groups:
        if _number(key, g.config.get(key)) is None:
            continue
        rest = json.dumps({k: g.config.get(k) for k in keys}, sort_keys=True, default=str)
        lines.setdefault(rest, []).append(g)
    found = []
    for line in lines.values():
        values = [_number(key, g.config.get(key)) for g in line]
        if len(set(values)) == len(values) >= 2:
            found.append(sorted(line, key=lambda g: _number(key, g.config.get(key))))
    return found


def swept_keys(groups) -> list[str]:
    """The numeric keys that at least one line sweeps."""
    return [k for k in varying_keys([g.config for g in groups]) if swept_lines(groups, k)]


def _positions(values: list[float]) -> tuple[dict, bool]:
    """{value: x}, ∞ placed past the largest finite value; log scale when the finite ones span 50× or more."""
    finite = sorted(v for v in set(values) if math.isfinite(v))
    log = len(finite) >= 3 and finite[0] > 0 and finite[-1] / finite[0] >= 50
    pos = {v: v for v in finite}
    if math.inf in values:
        if log:
            pos[math.inf] = finite[-1] * (finite[-1] / finite[0]) ** 0.25
        elif finite:
            pos[math.inf] = finite[-1] + max(0.25 * (finite[-1] - finite[0]), 1.0)
        else:
            pos[math.inf] = 1.0
    return pos, log


def plot_time_vs_value(groups, key: str, targets, path: str | Path, *, title: str | None = None,
                       metric=None) -> Figure | None:
    """Time to each target against ``key``, one line per algorithm (see module doc); None when nothing sweeps it."""
    lines = swept_lines(groups, key)
    if not lines or not targets:
        return None
    names = reader_labels([{k: v for k, v in line[0].config.items() if k != key} for line in lines])
    looks = styles([line[0].config for line in lines])
    values = [_number(key, g.config.get(key)) for line in lines for g in line]
    pos, log = _positions(values)
    symbol = SYMBOLS.get(key, key.rsplit(".", 1)[-1])
    rows = []
    with paper_style():
        fig = new_figure(figsize=(max(4.0, 3.0 * len(targets) + 0.6), 3.4))
        axes = fig.subplots(1, len(targets), squeeze=False)[0]
        for ax, target in zip(axes, targets):
            times = [[[r.ttt(target) for r in g.runs] for g in line] for line in lines]
            never = never_axis(ax, [t for ln in times for ts in ln for t in ts if math.isfinite(t)], axis="y")
            for line, name, look, line_times in zip(lines, names, looks, times):
                xs, means = [], []
                for g, ts in zip(line, line_times):
                    v = _number(key, g.config.get(key))
                    hit = [t for t in ts if math.isfinite(t)]
                    mean = float(np.mean(hit)) if hit else math.inf
                    xs.append(pos[v])
                    means.append(mean if hit else never)
                    ax.scatter([pos[v]] * len(ts), [t if math.isfinite(t) else never for t in ts], s=9,
                               color=look["color"], alpha=0.45, lw=0, zorder=2)
                    if len(hit) > 1:
                        ax.vlines(pos[v], min(hit), max(hit), color=look["color"], lw=1.0, alpha=0.7, zorder=2)
                    rows += [{"line": name, "point": g.label, key: value_text(key, g.config.get(key)),
                              "target": target, "seed": r.seed, "time": t, "mean_of_reached": mean,
                              "reached": len(hit), "seeds": len(ts)} for r, t in zip(g.runs, ts)]
                finite = [(x, m) for x, m in zip(xs, means) if m != never]
                ax.plot([x for x, _ in finite], [m for _, m in finite], color=look["color"], lw=1.6,
                        linestyle=look["linestyle"], marker=look["marker"], ms=5, label=wrap(name), zorder=3)
                gone = [x for x, m in zip(xs, means) if m == never]
                if gone:
                    ax.scatter(gone, [never] * len(gone), marker=look["marker"], s=30, facecolor="white",
                               edgecolor=look["color"], linewidths=1.3, zorder=3)
            if log:
                ax.set_xscale("log")
            ticks = sorted(pos.values())
            ax.set_xticks(ticks, [("∞" if v == math.inf else f"{v:g}") for v in sorted(pos)], minor=False)
            ax.xaxis.set_minor_locator(NullLocator())  # log axes label 2×10⁰ and such otherwise
            if math.inf in pos:
                finite_top = max((x for v, x in pos.items() if math.isfinite(v)), default=pos[math.inf])
                ax.axvline((finite_top + pos[math.inf]) / 2 if not log else math.sqrt(finite_top * pos[math.inf]),
                           color="0.6", lw=0.8, ls=":")
            ax.set_xlabel(symbol)
            ax.set_title(f"to {(metric or Metric()).target_text(target)}")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("virtual time to target (s)")
        handles, labels = axes[0].get_legend_handles_labels()
        # below the panels: at the upper right it ran into the two-line title (seen on the privacy study's figure)
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(handles)), frameon=False)
        fig.suptitle((title if title is not None else title_of([g for line in lines for g in line])) + "\n" +
                     CAPTION, fontsize=10)
    save(fig, Path(path), rows)
    return fig

