"""Plots of finished runs, drawn off-screen (Agg canvas; no display, no pyplot global state).

- :func:`plot_accuracy_vs_time`: test accuracy against virtual time, one line per run (one
  colour per grid point), target accuracies as dashed horizontal lines, like the paper's figures.
- :func:`plot_timeline`: a Gantt chart of one run's ``events.jsonl``: a row per device, a bar per
  job from start to the moment its update reached the server (or, for a dropped job, to its drop,
  marked with a red cross); SEAFL² notifications as red triangles, with the part of the job that
  partial training saved drawn hatched; aggregations as thin vertical lines. Stragglers,
  blocking, drops and partial training show at a glance. At most :data:`ROWS` rows: a run whose
  device ids go past that shows the ROWS devices with the most jobs (ties: lower id), in id
  order, and says so on the axis.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from seafl_dist.report.sinks import read_events

ROWS = 200  # the timeline's most rows: a million devices' rows would be one black block


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=120)
    return Path(path)


def _colors(n: int):
    from matplotlib import colormaps
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def plot_accuracy_vs_time(groups, targets, path: str | Path, *, title: str | None = None) -> Path:
    """``groups``: objects with ``.label`` and ``.runs`` (each with ``.rows`` of metrics.csv)."""
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for color, g in zip(_colors(len(groups)), groups):
        for j, r in enumerate(g.runs):
            ax.plot([row["time"] for row in r.rows], [row["accuracy"] for row in r.rows], color=color, lw=1.2, drawstyle="steps-post",
                    alpha=1.0 if len(g.runs) == 1 else 0.65, label=g.label if j == 0 else None)
    for t in targets:
        ax.axhline(t, ls="--", lw=0.8, color="grey")
        ax.annotate(f"{t:.0%}", xy=(1.0, t), xycoords=("axes fraction", "data"), xytext=(2, 0),
                    textcoords="offset points", va="center", fontsize=8, color="grey")
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    if groups:
        ax.legend(fontsize=8, loc="lower right", ncol=1 if len(groups) <= 8 else 2)
    return _save(fig, Path(path))


def plot_timeline(events_path: str | Path, path: str | Path, *, until: float | None = None,
                  title: str | None = None) -> Path:
    """Gantt chart of one run's jobs from its ``events.jsonl``, up to virtual time ``until``."""
    events = read_events(events_path)
    end = max((e.get("time", 0.0) for e in events), default=0.0)
    until = end if until is None else until
    starts = {e["job"]: e for e in events if e["event"] == "start"}
    finishes = {e["job"]: e for e in events if e["event"] == "finish"}
    drops = {e["job"]: e for e in events if e["event"] == "drop"}
    notifies = [e for e in events if e["event"] == "notify" and e["time"] <= until]
    aggs = [e for e in events if e["event"] == "aggregate" and e["time"] <= until]
    notified = {e["job"] for e in events if e["event"] == "notify"}
    aggregated = {u["job"] for e in events if e["event"] == "aggregate" for u in e["updates"]}
    bars = defaultdict(list)  # (device, kind) -> [(start, width)]
    for job, s in starts.items():
        if s["time"] > until:
            continue
        planned = s["epoch_ends"][-1] if s.get("epoch_ends") else s["time"]
        fin = finishes.get(job) or drops.get(job)
        stop = min(fin["time"] if fin else max(planned, end), until)
        kind = ("in flight at the end" if fin is None else "dropped" if job in drops else "partial (notified)"
                if job in notified else "aggregated" if job in aggregated else "finished, not aggregated")
        bars[s["device"], kind].append((s["time"], max(stop - s["time"], 1e-9)))
        if fin is not None and job in notified and job not in drops and planned > fin["time"]:
            bars[s["device"], "saved by partial training"].append((fin["time"], min(planned, until) - fin["time"]))
    row, shown = _rows([s["device"] for s in starts.values()])
    bars = {(row[d], kind): spans for (d, kind), spans in bars.items() if d in row}
    notifies = [e for e in notifies if e["device"] in row]
    dropped = [e for e in drops.values() if e["time"] <= until and e["device"] in row]
    num_devices = 1 + max(row.values(), default=0)
    solid = dict(edgecolor="white", lw=0.4)  # so back-to-back jobs of one device stay apart
    style = {"aggregated": dict(facecolor="tab:blue", **solid),
             "partial (notified)": dict(facecolor="tab:orange", **solid),
             "saved by partial training": dict(facecolor="none", edgecolor="tab:orange", hatch="////", lw=0.5),
             "finished, not aggregated": dict(facecolor="lightgrey", **solid),
             "dropped": dict(facecolor="mistyrose", edgecolor="tab:red", lw=0.5),
             "in flight at the end": dict(facecolor="lightgrey", edgecolor="grey", hatch="..", lw=0.5)}
    fig = Figure(figsize=(11, min(max(3.0, 1.5 + 0.14 * num_devices), 24)), layout="constrained")
    ax = fig.subplots()
    if aggs:
        ax.vlines([e["time"] for e in aggs], -0.5, num_devices - 0.5, color="black", lw=0.5,
                  alpha=0.35 if len(aggs) < 300 else 0.15)
    for (device, kind), spans in sorted(bars.items()):  # the saved remainder stays under the next job
        ax.broken_barh(spans, (device - 0.35, 0.7), zorder=1 if kind == "saved by partial training" else 2,
                       **style[kind])
    if notifies:
        ax.scatter([e["time"] for e in notifies], [e["device"] for e in notifies], marker="v", s=18,
                   color="red", zorder=3)
    if dropped:
        ax.scatter([e["time"] for e in dropped], [row[e["device"]] for e in dropped], marker="x", s=16,
                   color="tab:red", lw=1.0, zorder=3)
    used = {kind for _, kind in bars}
    handles = [Patch(label=k, **style[k]) for k in style if k in used]
    handles.append(Patch(facecolor="black", alpha=0.4, label=f"aggregation ({len(aggs)})"))
    if notifies:
        handles.append(Patch(facecolor="red", label=f"notification ({len(notifies)})"))
    if drops:
        handles.append(Patch(facecolor="tab:red", label=f"drop ({len(drops)}; x at the drop)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xlim(0, max(until, 1e-9))
    ax.set_ylim(-0.5, num_devices - 0.5)
    ax.invert_yaxis()
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("device" if shown is None else shown)
    if shown is not None:  # rows are not ids here: label some rows with their device ids
        ids, step = sorted(row, key=row.get), max(1, num_devices // 25)
        ax.set_yticks(range(0, num_devices, step), [str(d) for d in ids[::step]], fontsize=6)
    ax.set_title(title or f"jobs of {Path(events_path).parent.name}")
    return _save(fig, Path(path))


def _rows(devices: list[int]) -> tuple[dict, str | None]:
    """({device: its row}, the axis label saying which devices show, or None when the rows are the ids)."""
    if 1 + max(devices, default=0) <= ROWS:
        return {d: d for d in range(1 + max(devices, default=0))}, None
    from collections import Counter
    jobs = Counter(devices)
    top = sorted(sorted(jobs, key=lambda d: (-jobs[d], d))[:ROWS])
    return ({d: i for i, d in enumerate(top)},
            f"device: {len(top)} of {len(jobs)} that trained (most jobs; ties lower id)")
