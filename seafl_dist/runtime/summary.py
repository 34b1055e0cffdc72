"""What a run's summary says beyond the server's own counters, and how the CLI prints it."""
from __future__ import annotations

import math

from seafl_dist.report import time_to_target
from seafl_dist.versions import stamp


def build_summary(cfg, rows: list[dict], counts, staleness: list, *, status: str, error: str | None, wall: float,
                  churn: bool, profile_sha256: str | None, stalled: str | None,
                  diverged_at: dict | None = None) -> dict:
    """What summary.json holds: the run's outcome from its metric rows and the server's counters, and
    which seafl (package and numerics version, seafl_dist/versions.py) trained it."""
    targets = sorted(set(cfg.run.targets) | ({cfg.run.target_accuracy} - {None}))
    last = rows[-1] if rows else {}
    return {
        "status": status, "error": error, "name": cfg.name, "algorithm": cfg.algorithm.name,
        "final_accuracy": last.get("accuracy"), "final_loss": last.get("loss"),
        "best_accuracy": max((r["accuracy"] for r in rows), default=None),
        "aggregations": counts["aggregate"], "virtual_time": last.get("time"),
        "time_to_target": {str(t): time_to_target(rows, t) for t in targets},
        "mean_staleness": sum(staleness) / len(staleness) if staleness else 0.0,
        "max_staleness": max(staleness, default=0),
        "notifications": counts["notify"], "rejected_updates": counts["rejected"],
        "diverged_at": diverged_at,  # {"version", "time"} of the evaluation where it diverged (report/divergence.py)
        "events": {k: counts[k] for k in ("start", "notify", "finish", "aggregate", "eval")},
        "wall_time_s": wall, **stamp(),
        **churn_figures(counts, churn=churn, profile_sha256=profile_sha256, stalled=stalled),
    }


def churn_figures(counts, *, churn: bool, profile_sha256: str | None, stalled: str | None) -> dict:
    """summary.json's device-churn entries (docs/devices.md); {} without churn, so the file stays what it was."""
    out: dict = {}
    if churn:
        out["drops"] = {"total": counts["drop"], "offline": counts["drop_offline"], "dropout": counts["drop_dropout"]}
    if profile_sha256:
        out["profile_sha256"] = profile_sha256
    if stalled:
        out["stalled"] = stalled
    return out


def format_summary(summary: dict) -> str:
    """The human summary the CLI prints at the end of a run."""
    ttt = ", ".join(f"{float(t):.0%}: " + ("never" if v is None or math.isinf(v) else f"{v:.1f}s")
                    for t, v in summary["time_to_target"].items())
    ev = summary["events"]
    acc = summary["final_accuracy"]
    return "\n".join([
        f"run {summary['name']} ({summary['algorithm']}): {summary['status']}",
        f"  final accuracy {acc:.4f}, best {summary['best_accuracy']:.4f}" if acc is not None else "  no evaluation",
        f"  virtual time {summary['virtual_time'] or 0:.1f}s over {summary['aggregations']} aggregations,"
        f" real time {summary['wall_time_s']:.1f}s",
        f"  time to target accuracy: {ttt}",
        f"  events: {ev['start']} start, {ev['finish']} finish, {ev['notify']} notify, "
        f"{ev['aggregate']} aggregate, {ev['eval']} eval; mean staleness {summary['mean_staleness']:.2f},"
        f" rejected updates {summary['rejected_updates']}",
        *([f"  drops: {d['total']} ({d['offline']} offline, {d['dropout']} by dropout)"] if (d := summary.get("drops"))
          else []),
        *([f"  stalled: {summary['stalled']}"] if summary.get("stalled") else []),
        *([f"  diverged at version {d['version']} (virtual time {d['time']:.1f}s): the accuracies above are "
           f"of a run that broke down there"] if (d := summary.get("diverged_at")) else []),
    ])
