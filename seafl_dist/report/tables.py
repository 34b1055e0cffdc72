"""Time-to-accuracy tables over finished runs: per run, and per grid point (mean ± std over seeds; ε composed over
them, report/epsilon.py, never averaged).

    runs = find_runs(["runs/buffer_size"])           # report/runs.py: a run dir, a sweep dir, or a dir of run dirs
    groups = group_runs(runs)                        # runs that differ only in run.seed
    rows = group_rows(groups, targets=[0.5, 0.7], baseline="fedbuff")

Every figure comes from the run's own ``metrics.csv`` (time to target, best and final accuracy)
and ``summary.json`` (aggregations, mean staleness over aggregated updates, notifications,
wall time; recomputed from ``metrics.csv`` where the summary is missing). A target never
reached is ``inf`` ("never"): it counts as not reached, and a group's mean time is over the
seeds that reached it, with "(k/n)" shown when only k of n did. The ratio against the
baseline (the paper's "22% faster" is a ratio of 0.78) is the group's mean time over the
baseline's, given only where every seed of both reached the target.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field

from seafl_dist.report.epsilon import composed_of, seeded
from seafl_dist.report.runs import RunResult

IGNORED = ("name", "run.seed", "run.targets", "logging.", "runtime.")
ALWAYS = ("algorithm.name", "algorithm.buffer_size", "algorithm.staleness_limit")
SHORT = {"algorithm.name": "algorithm", "algorithm.buffer_size": "K", "algorithm.staleness_limit": "beta"}


@dataclass
class Group:
    key: str
    runs: list = field(default_factory=list)
    label: str = ""

    @property
    def config(self) -> dict:
        return self.runs[0].config

    @property
    def sweep(self) -> str:
        return self.runs[0].sweep


def _ignored(key: str) -> bool:
    return any(key == i or (i.endswith(".") and key.startswith(i)) for i in IGNORED)


def setting_keys(runs: list[RunResult]) -> list[str]:
    """The always-shown settings plus every config key whose value differs between runs."""
    keys = dict.fromkeys(k for r in runs for k in r.config if not _ignored(k))
    varying = [k for k in keys if len({json.dumps(r.config.get(k), sort_keys=True) for r in runs}) > 1]
    return list(ALWAYS) + [k for k in varying if k not in ALWAYS]


def short(key: str) -> str:
    return SHORT.get(key, key.rsplit(".", 1)[-1])


INF_WHEN_NULL = ("algorithm.staleness_limit", "run.max_time", "run.max_aggregations")


def fmt_value(v, key: str = "") -> str:
    if v is None:
        return "inf" if key in INF_WHEN_NULL else "null"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def group_runs(runs: list[RunResult]) -> list[Group]:
    """Runs of one sweep's grid point (its label in sweep.json) form one group; runs outside a sweep, those
    that differ only in seed (and runtime/logging). In order of appearance."""
    groups: dict[str, Group] = {}
    for r in runs:
        if r.sweep and r.label is not None:  # a grid point may differ in a runtime key only (runtime.batch_jobs)
            key = f"{r.sweep}\0point\0{r.label}"
        else:
            key = json.dumps({k: v for k, v in r.config.items() if not _ignored(k)}, sort_keys=True, default=str)
            key = f"{r.sweep}\0{key}"
        groups.setdefault(key, Group(key)).runs.append(r)
    groups = list(groups.values())
    varying = [k for k in setting_keys(runs) if len({json.dumps(r.config.get(k)) for r in runs}) > 1]
    for g in groups:
        labels = {r.label for r in g.runs}
        if len(labels) == 1 and None not in labels:
            g.label = labels.pop()
        else:
            g.label = ",".join(f"{short(k)}={fmt_value(g.config.get(k), k)}" for k in varying) or \
                str(g.config.get("algorithm.name", "run"))
    if len({g.label for g in groups}) < len(groups):  # same label from different sweeps
        for g in groups:
            g.label = f"{g.sweep}/{g.label}" if g.sweep else g.label
    return groups


def mean_std(values: list[float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    if any(math.isinf(v) for v in vals):  # ε = ∞ (z = 0): statistics.stdev cannot take an infinity
        return (vals[0], 0.0) if all(v == vals[0] for v in vals) else (sum(vals) / len(vals), math.nan)
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def find_baseline(groups: list[Group], group: Group, baseline: str | None) -> Group | None:
    """The group named ``baseline`` (by label, else by algorithm), preferring the same sweep."""
    if not baseline:
        return None
    for pool in ([g for g in groups if g.sweep == group.sweep], groups):
        for match in (lambda g: g.label == baseline or g.label.endswith("/" + baseline),
                      lambda g: g.config.get("algorithm.name") == baseline):
            hits = [g for g in pool if match(g)]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                return None
    return None


def baseline_problem(baseline: str, labels: list[str], algorithms: list[str]) -> str | None:
    """Why ``baseline`` names no single grid point among those ``labels`` (each point's algorithm.name in
    ``algorithms``), or None: a label, else the algorithm of exactly one point (as :func:`find_baseline` takes
    it). The reason lists the labels that exist."""
    if any(lab == baseline or lab.endswith("/" + baseline) for lab in labels):
        return None
    hits = [lab for lab, a in zip(labels, algorithms) if a == baseline]
    if len(hits) == 1:
        return None
    if hits:
        return (f"names the algorithm of {len(hits)} grid points ({', '.join(hits)}); give one point's label")
    return (f"names no grid point; the labels: {', '.join(dict.fromkeys(labels))} (or the algorithm.name of one "
            f"point: {', '.join(dict.fromkeys(algorithms))})")


def ttt_stats(runs: list[RunResult], target: float) -> dict:
    times = [r.ttt(target) for r in runs]
    reached = [t for t in times if math.isfinite(t)]
    mean, std = mean_std(reached)
    return {"mean": mean if reached else math.inf, "std": std if reached else math.nan,
            "reached": len(reached), "n": len(times)}


def ratio(stats: dict, base: dict | None) -> float:
    """Mean time over the baseline's; nan unless every seed of both reached (inf: never reached)."""
    if base is None or base["reached"] < base["n"] or base["reached"] == 0:
        return math.nan
    if stats["reached"] == 0:
        return math.inf
    if stats["reached"] < stats["n"]:
        return math.nan
    return stats["mean"] / base["mean"]


def group_rows(groups: list[Group], targets: list[float], baseline: str | None) -> list[dict]:
    """One row per group: settings, time-to-target stats, ratios, mean ± std of the other figures."""
    keys = setting_keys([r for g in groups for r in g.runs])
    rows = []
    for g in groups:
        base = find_baseline(groups, g, baseline)
        row = {"label": g.label, "runs": len(g.runs), "seeds": len({json.dumps(r.seed) for r in g.runs}),
               "baseline": base.label if base else None,
               "settings": {k: g.config.get(k) for k in keys}}
        for t in targets:
            st = ttt_stats(g.runs, t)
            row[f"ttt_{t:g}"] = st
            row[f"ratio_{t:g}"] = ratio(st, ttt_stats(base.runs, t) if base else None)
        figs = [r.figures() for r in g.runs]
        for name in figs[0]:
            if name != "epsilon":  # ε composes over the seeds; it is never averaged (report/epsilon.py)
                row[name] = mean_std([f[name] for f in figs])
        if any("epsilon" in f for f in figs):
            row["epsilon"], row["epsilon_seeded"] = composed_of(g.runs), seeded(g.runs)
        row["diverged"] = sum(r.diverged_at is not None for r in g.runs)
        rows.append(row)
    return rows


def run_rows(groups: list[Group], targets: list[float], baseline: str | None) -> list[dict]:
    """One row per run; its ratio is against the baseline group's mean time."""
    keys = setting_keys([r for g in groups for r in g.runs])
    rows = []
    for g in groups:
        base = find_baseline(groups, g, baseline)
        for r in g.runs:
            row = {"run": r.name, "dir": str(r.dir), "label": g.label, "seed": r.seed, "status": r.status,
                   "settings": {k: r.config.get(k) for k in keys}}
            for t in targets:
                st = ttt_stats([r], t)
                row[f"ttt_{t:g}"] = st["mean"]
                row[f"ratio_{t:g}"] = ratio(st, ttt_stats(base.runs, t) if base else None)
            row.update(r.figures())
            if "epsilon" in row:
                row["epsilon_seeded"] = seeded([r])
            at = r.diverged_at or {}
            row["diverged_version"], row["diverged_time"] = at.get("version"), at.get("time")
            rows.append(row)
    return rows
