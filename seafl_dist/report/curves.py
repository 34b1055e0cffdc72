"""The curves of the metric-against-time figure (report/figures.py): each arm's mean over its seeds, the
time ranges of the two panels, arms whose means coincide, and where runs diverged.

- The main panel runs from 0 to the end of the longest run (:func:`run_end`), so how every run ends
  shows (a collapse late in a run included); the close-up keeps the range around the targets:
  up to where the slowest arm's mean reaches the highest target, plus 10% (:func:`time_axis_end`).
- Two arms whose mean curves coincide (:data:`SAME`) would hide one under the other: one line is
  drawn for both, its legend entry naming both (:func:`same_curves`).
- A run that diverged (summary.json's ``diverged_at``, report/divergence.py) gets a cross on its arm's
  mean curve at that time (:func:`mark_divergence`).
- Runs that end at different virtual times (``run.max_aggregations`` caps a count, not a time) get a bar on
  their arm's mean curve where each ends before the last (:func:`mark_ends`): past it the mean holds that
  seed at its last value; :func:`uneven_ends_note` says so in one line and suggests ``run.max_time``.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

MARGIN = 1.1  # the close-up runs 10% past the slowest arm's mean reaching the highest target
SAME = 1e-9  # two mean curves closer than this everywhere on their common grid are one curve
DIVERGED = {"marker": "x", "ms": 9, "mew": 2.2, "color": "#c0392b", "ls": "none", "zorder": 5}
ENDED = {"marker": "|", "ms": 16, "mew": 2.4, "ls": "none", "zorder": 6}  # in the arm's colour, outlined (ended())
UNEVEN = 0.01  # runs whose ends differ by more than this share of the latest end "end at different times"


def mean_curve(runs, name: str = "accuracy") -> dict:
    """The seeds' step curves of metric ``name`` on their common time grid: {time, mean, min, max, curves}."""
    curves = [(np.array([r["time"] for r in run.rows], float),
               np.array([np.nan if r.get(name) is None else r[name] for r in run.rows], float))
              for run in runs if run.rows]
    if not curves:
        empty = np.array([])
        return {"time": empty, "mean": empty, "min": empty, "max": empty, "curves": []}
    grid = np.unique(np.concatenate([t for t, _ in curves]))
    held = [_held(t, acc, grid) for t, acc in curves]
    stack = np.vstack(held)
    with np.errstate(all="ignore"), contextlib.suppress(RuntimeWarning):
        return {"time": grid, "mean": np.nanmean(stack, 0), "min": np.nanmin(stack, 0), "max": np.nanmax(stack, 0),
                "curves": curves}


def _held(t: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """steps-post: the last value at or before each grid time (the last one after the end); NaN before the start."""
    i = np.searchsorted(t, grid, side="right") - 1
    return np.where(i >= 0, values[np.clip(i, 0, None)], np.nan)


def reach_time(curve: dict, target: float, mode: str = "max") -> float:
    """When the mean first reaches ``target``: at or above it (``max``), at or below (``min``)."""
    hit = np.nonzero(curve["mean"] >= target if mode == "max" else curve["mean"] <= target)[0]
    return float(curve["time"][hit[0]]) if len(hit) else math.inf


def run_end(curves: list[dict]) -> float:
    """The end of the longest run: the main panel's time axis ends here."""
    return max((float(c["time"][-1]) for c in curves if len(c["time"])), default=1.0)


def time_axis_end(curves: list[dict], targets: list[float], mode: str = "max") -> float:
    """Where the slowest arm's mean reaches the hardest target (the highest; for ``min``, the lowest), plus
    10%; the longest run where none does."""
    if targets:
        hardest = max(targets) if mode == "max" else min(targets)
        reached = [t for t in (reach_time(c, hardest, mode) for c in curves) if math.isfinite(t)]
        if reached:
            return min(max(reached) * MARGIN, run_end(curves)) if max(reached) > 0 else run_end(curves)
    return run_end(curves)


def zoom_range(curves: list[dict], targets: list[float], end: float, metric=None) -> tuple[float, float] | None:
    """The range of the zoomed panel: from a little short of the easiest target to a little past the hardest
    target or band within the time axis; None when no arm's mean reaches the easiest target by ``end``, or
    the range would not be a close-up. Accuracy (the default metric): from below the lowest target, up to
    1 at most, and only above 50%; another metric: within the range its curves span, and at most half of it."""
    from seafl_dist.report.metric import Metric
    metric = metric or Metric()
    up = metric.mode == "max"
    easiest = min(targets) if targets and up else max(targets) if targets else None
    if easiest is None or not any(reach_time(c, easiest, metric.mode) <= end for c in curves):
        return None
    span = max(targets) - min(targets)
    within = [c for c in curves if np.any(c["time"] <= end)]
    top = max(float(np.nanmax(c["max"][c["time"] <= end])) for c in within)
    bottom = min(float(np.nanmin(c["min"][c["time"] <= end])) for c in within)
    if metric.is_accuracy:
        lo = min(targets) - max(0.05, 0.5 * span)
        hi = min(1.0, max(max(targets), top) + max(0.01, 0.2 * span))
        return (lo, hi) if lo >= 0.5 else None
    full = max(top, max(targets)) - min(bottom, min(targets))
    pad, edge = max(0.05 * full, 0.5 * span), max(0.01 * full, 0.2 * span)
    lo, hi = ((easiest - pad, max(max(targets), top) + edge) if up else
              (min(min(targets), bottom) - edge, easiest + pad))
    return (lo, hi) if 0 < hi - lo <= 0.5 * full else None


def same(a: dict, b: dict) -> bool:
    """Whether two mean curves coincide: the same span, and max |Δ| ≤ :data:`SAME` on their common grid."""
    if not len(a["time"]) or not len(b["time"]) or a["time"][-1] != b["time"][-1]:
        return False
    grid = np.union1d(a["time"], b["time"])
    x, y = _held(a["time"], a["mean"], grid), _held(b["time"], b["mean"], grid)
    both = ~np.isnan(x) & ~np.isnan(y)
    return bool(np.array_equal(np.isnan(x), np.isnan(y)) and np.all(np.abs(x[both] - y[both]) <= SAME))


def same_curves(curves: list[dict]) -> dict[int, list[int]]:
    """{arm drawn: the later arms drawn as it} for every group of arms whose means coincide."""
    drawn: dict[int, list[int]] = {}
    for i, c in enumerate(curves):
        first = next((j for j in drawn if same(curves[j], c)), None)
        if first is None:
            drawn[i] = []
        else:
            drawn[first].append(i)
    return drawn


def joint_label(labels: list[str], arm: int, hidden: list[int], wrap=lambda text: text) -> str:
    """An arm's legend entry, naming the arms drawn as it, one a line: "FedBuff, β = 10⏎= FedBuff, β = ∞ (one
    curve)"; ``wrap`` breaks each arm's label on its own."""
    if not hidden:
        return wrap(labels[arm])
    return "\n= ".join(wrap(labels[i]) for i in [arm, *hidden]) + " (one curve)"


def diverged_points(group, curve: dict) -> list[tuple[float, float]]:
    """(time, the arm's mean there) for each run of ``group`` that diverged."""
    out = []
    for run in group.runs:
        at = (run.summary or {}).get("diverged_at")
        if at and len(curve["time"]):
            t = float(at["time"])
            i = max(0, int(np.searchsorted(curve["time"], t, side="right")) - 1)
            out.append((t, float(curve["mean"][i])))
    return out


def mark_divergence(ax, groups, curves: list[dict], drawn) -> bool:
    """A cross on the mean curve where each run diverged; True when any was drawn (the legend then says so)."""
    marks = [p for i in drawn for p in diverged_points(groups[i], curves[i])]
    if marks:
        ax.plot([t for t, _ in marks], [a for _, a in marks], **DIVERGED)
    return bool(marks)


def draw_curves(ax, groups, labels, looks, curves, end: float, seed_curves: bool, drawn) -> None:
    """Each drawn arm's mean (stepped, with sparse markers) and min–max band, and its seeds faint on request."""
    for i in drawn:
        g, label, look, c = groups[i], labels[i], looks[i], curves[i]
        if not len(c["time"]):
            continue
        every = max(1, int(np.searchsorted(c["time"], end)) // 6)
        ax.plot(c["time"], c["mean"], drawstyle="steps-post", lw=1.6, label=label, color=look["color"],
                linestyle=look["linestyle"], marker=look["marker"], markevery=every, ms=4.5, zorder=3)
        if len(g.runs) > 1:
            ax.fill_between(c["time"], c["min"], c["max"], step="post", color=look["color"], alpha=0.12, lw=0, zorder=2)
        if seed_curves:
            for t, acc in c["curves"]:
                ax.plot(t, acc, drawstyle="steps-post", lw=0.6, alpha=0.35, color=look["color"], zorder=2)


def ended(color) -> dict:
    """The keywords of a run's end bar in ``color``, outlined in black so it shows on its own curve's steps."""
    from matplotlib import patheffects
    return {**ENDED, "color": color, "path_effects": [patheffects.withStroke(linewidth=4.4, foreground="black")]}


def run_ends(groups) -> list[float]:
    """Each run's last evaluated virtual time, over every group."""
    return [float(run.rows[-1]["time"]) for g in groups for run in g.runs if run.rows]


def uneven(groups) -> tuple[float, float] | None:
    """(earliest, latest) end of the runs when they end at different virtual times (by more than
    :data:`UNEVEN` of the latest), else None."""
    ends = run_ends(groups)
    if len(ends) < 2 or max(ends) - min(ends) <= UNEVEN * max(ends):
        return None
    return min(ends), max(ends)


def mark_ends(ax, groups, curves: list[dict], drawn, looks) -> bool:
    """A bar on each drawn arm's mean curve where each of its runs ends before the latest run does, when the
    runs end at different times; True when any was drawn (the legend then says so)."""
    span = uneven(groups)
    if span is None:
        return False
    marked = False
    for i in drawn:
        c = curves[i]
        ends = sorted({float(r.rows[-1]["time"]) for r in groups[i].runs if r.rows} - {span[1]})
        ends = [t for t in ends if span[1] - t > UNEVEN * span[1]]
        if ends and len(c["time"]):
            at = [float(c["mean"][max(0, int(np.searchsorted(c["time"], t, side="right")) - 1)]) for t in ends]
            ax.plot(ends, at, **ended(looks[i]["color"]))
            marked = True
    return marked


def uneven_ends_note(groups) -> str | None:
    """One line when the runs end at different virtual times, suggesting ``run.max_time``; else None."""
    span = uneven(groups)
    if span is None:
        return None
    return (f"The runs end at different virtual times, from {span[0]:.1f} s to {span[1]:.1f} s "
            f"(run.max_aggregations caps a count of aggregations, not a time): a bar on a curve marks where a run "
            f"ends, past it the mean holds that seed at its last value, and \"final\" compares different times; "
            f"set run.max_time (e.g. run.max_time={span[0]:g}) to end every run at one time.")
