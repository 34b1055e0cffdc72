"""What a run's summary says beyond the server's own counters, and how the CLI prints it."""
from __future__ import annotations

import math

from seafl_dist.report import time_to_target
from seafl_dist.report.metric import Metric
from seafl_dist.versions import stamp


def build_summary(cfg, rows: list[dict], counts, staleness: list, *, status: str, error: str | None, wall: float,
                  churn: bool, profile_sha256: str | None, stalled: str | None,
                  diverged_at: dict | None = None) -> dict:
    """What summary.json holds: the run's outcome from its metric rows and the server's counters, and
    which seafl (package and numerics version, seafl_dist/versions.py) trained it. ``wall_time_s``, the real
    seconds, is left out under DP without ``privacy.diagnostics`` (docs/privacy.md, "No wall-clock channel")."""
    metric = Metric.of(cfg.run)  # the easiest target first: ascending for max, descending for min
    targets = sorted(set(cfg.run.targets) | ({cfg.run.target_accuracy} - {None}), reverse=metric.mode == "min")
    last = rows[-1] if rows else {}
    return {
        "status": status, "error": error, "name": cfg.name, "algorithm": cfg.algorithm.name,
        "final_accuracy": last.get("accuracy"), "final_loss": last.get("loss"),
        "best_accuracy": max((r["accuracy"] for r in rows if r.get("accuracy") is not None), default=None),
        # the target metric (run.target_metric, run.target_mode): what "time to target", final and best follow
        "target_metric": metric.name, "target_mode": metric.mode, "final": last.get(metric.name),
        "best": metric.best(r.get(metric.name) for r in rows),
        "aggregations": counts["aggregate"], "virtual_time": last.get("time"),
        "time_to_target": {str(t): time_to_target(rows, t, metric) for t in targets},
        "mean_staleness": sum(staleness) / len(staleness) if staleness else 0.0,
        "max_staleness": max(staleness, default=0),
        "notifications": counts["notify"], "rejected_updates": counts["rejected"],
        "diverged_at": diverged_at,  # {"version", "time"} of the evaluation where it diverged (report/divergence.py)
        "events": {k: counts[k] for k in ("start", "notify", "finish", "aggregate", "eval")},
        **({} if cfg.privacy.withheld else {"wall_time_s": wall}), **stamp(),
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
    metric = Metric(summary.get("target_metric", "accuracy"), summary.get("target_mode", "max"))
    ttt = ", ".join(f"{metric.target_text(t)}: " + ("never" if v is None or math.isinf(v) else f"{v:.1f}s")
                    for t, v in summary["time_to_target"].items())
    ev = summary["events"]
    final, best = summary.get("final", summary["final_accuracy"]), summary.get("best", summary["best_accuracy"])
    way = "" if metric.is_accuracy else f" ({metric.direction})"
    return "\n".join([
        f"run {summary['name']} ({summary['algorithm']}): {summary['status']}",
        f"  final {metric.name} {final:.4f}, best {best:.4f}{way}" if final is not None else "  no evaluation",
        f"  virtual time {summary['virtual_time'] or 0:.1f}s over {summary['aggregations']} aggregations"
        + (f", real time {summary['wall_time_s']:.1f}s" if "wall_time_s" in summary else ""),
        f"  time to target {metric.name}: {ttt}",
        f"  events: {ev['start']} start, {ev['finish']} finish, {ev['notify']} notify, "
        f"{ev['aggregate']} aggregate, {ev['eval']} eval; mean staleness {summary['mean_staleness']:.2f},"
        f" rejected updates {summary['rejected_updates']}",
        *([f"  drops: {d['total']} ({d['offline']} offline, {d['dropout']} by dropout)"] if (d := summary.get("drops"))
          else []),
        *([f"  stalled: {summary['stalled']}"] if summary.get("stalled") else []),
        *device_lines(summary.get("device_eval"), metric),
        *([f"  diverged at version {d['version']} (virtual time {d['time']:.1f}s): the {metric.name} figures above "
           f"are of a run that broke down there"] if (d := summary.get("diverged_at")) else []),
    ])


def device_lines(device_eval: dict | None, metric: Metric) -> list[str]:
    """The device evaluation's last summary (runtime/device_eval.py), one line; [] when it is off."""
    stats = ((device_eval or {}).get("metrics") or {}).get(metric.name)
    if not stats or stats.get("p50") is None:
        return []
    left = f", {stats['without_holdout']} without held-out data left out" if stats["without_holdout"] else ""
    return [f"  devices' own held-out {metric.name} at version {device_eval['version']}: p10 {stats['p10']:.4f}, "
            f"p50 {stats['p50']:.4f}, worst 10% {stats['worst10_mean']:.4f}, mean {stats['mean']:.4f} over "
            f"{stats['devices']} devices{left}"]
