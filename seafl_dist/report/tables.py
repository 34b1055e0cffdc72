"""Time-to-accuracy tables over finished runs: per run, and per grid point (mean ± std over seeds).

    runs = find_runs(["runs/buffer_size"])           # a run dir, a sweep dir, or a dir of run dirs
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
import sys
from dataclasses import dataclass, field
from pathlib import Path

from seafl_dist.report.metric import Metric
from seafl_dist.report.sinks import read_config, read_metrics, read_summary, time_to_target
from seafl_dist.settings import ConfigError

IGNORED = ("name", "run.seed", "run.targets", "logging.", "runtime.")
ALWAYS = ("algorithm.name", "algorithm.buffer_size", "algorithm.staleness_limit")
SHORT = {"algorithm.name": "algorithm", "algorithm.buffer_size": "K", "algorithm.staleness_limit": "beta"}


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in (tree or {}).items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + str(k)] = v
    return out


@dataclass
class RunResult:
    dir: Path
    config: dict  # dotted key → value, from config.yaml
    rows: list  # metrics.csv
    summary: dict  # summary.json ({} if missing)
    sweep: str = ""  # the sweep dir's name when the run came from one
    label: str | None = None  # the sweep's label of the run's grid point
    point: tuple = ()  # the keys the sweep set for this run (its grid point's), from sweep.json

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def seed(self):
        return self.config.get("run.seed")

    @property
    def status(self) -> str:
        return self.summary.get("status", "unknown")

    @property
    def metric(self) -> Metric:
        """What the run's targets follow (run.target_metric, run.target_mode; config.yaml omits the defaults)."""
        return Metric(self.config.get("run.target_metric", "accuracy"), self.config.get("run.target_mode", "max"))

    def ttt(self, target: float) -> float:
        return time_to_target(self.rows, target, self.metric)

    @property
    def diverged_at(self) -> dict | None:
        """``{"version", "time"}`` where the run diverged (summary.json, report/divergence.py), else None."""
        return self.summary.get("diverged_at")

    def figures(self) -> dict:
        rows, s = self.rows, self.summary
        upd = sum(r["updates"] or 0 for r in rows)
        stale = sum((r["mean_staleness"] or 0) * (r["updates"] or 0) for r in rows) / upd if upd else 0.0
        m = self.metric
        best = m.best(r.get(m.name) for r in rows)
        return {
            f"best_{m.name}": math.nan if best is None else best,
            f"final_{m.name}": rows[-1].get(m.name, math.nan) if rows else math.nan,
            "aggregations": s.get("aggregations", rows[-1]["version"] if rows else 0),
            "virtual_time": rows[-1]["time"] if rows else 0.0,
            "mean_staleness": s.get("mean_staleness", stale),
            "notifications": s.get("notifications", rows[-1]["notifications"] if rows else 0),
            "drops": (s.get("drops") or {}).get("total", 0),  # jobs lost to churn (docs/devices.md)
            "wall_time_s": s.get("wall_time_s", math.nan),
        }


def common_metric(runs: list[RunResult]) -> Metric:
    """The one target metric of ``runs``; runs that follow different ones are refused in one line (their
    times to target and their curves would not be of one thing)."""
    found = {r.metric for r in runs}
    if len(found) > 1:
        seen = {}
        for r in runs:
            seen.setdefault(r.metric, r.name)
        raise ConfigError("these runs follow different target metrics: " + "; ".join(
            f"{m.name} ({m.mode}) in {name}" for m, name in seen.items()) + "; report each metric's runs apart")
    return found.pop() if found else Metric()


def load_run(run_dir: Path, sweep: str = "", label: str | None = None, point: tuple = ()) -> RunResult:
    run_dir = Path(run_dir)
    config, summary = read_config(run_dir) or {}, read_summary(run_dir) or {}
    return RunResult(run_dir, flatten(config), read_metrics(run_dir / "metrics.csv"), summary, sweep, label, point)


def repeated_keys(run_name: str) -> list[str]:
    """Keys named twice in a sweep run's directory name: ``'algorithm=seafl,seed=1,seed=0'`` -> ``['seed']``."""
    keys = [part.split("=", 1)[0] for part in run_name.split(",") if "=" in part]
    return sorted({k for k in keys if keys.count(k) > 1})


def repeated_key_warning(sweep_dir: Path, names) -> str | None:
    """One line about a sweep dir whose runs are named with a repeated key (made before a grid over
    run.seed became the sweep's seeds: such runs all ran the sweep's seed, whatever their name says)."""
    bad = [n for n in names if repeated_keys(n)]
    if not bad:
        return None
    return (f"seafl: warning: sweep dir {sweep_dir}: {len(bad)} run(s) named with a repeated key ({bad[0]}: "
            f"{', '.join(repeated_keys(bad[0]))} twice); an older seafl_dist let the sweep's seeds override a grid "
            f"over run.seed, so such runs may repeat each other's seed: rerun the sweep into a new --out")


def find_runs(paths) -> list[RunResult]:
    """Runs under each path: a run dir (has metrics.csv), a sweep dir (sweep.json), or any dir of runs.
    A sweep dir whose runs are named with a repeated key is flagged in one line on stderr."""
    runs, seen = [], set()
    for p in map(Path, paths):
        if not p.is_dir():
            raise FileNotFoundError(f"'{p}' is not a directory; give a run dir or a sweep dir")
        if (p / "metrics.csv").exists():
            found = [(p, "", None, ())]
        elif (p / "sweep.json").exists():
            meta = json.loads((p / "sweep.json").read_text())
            warning = repeated_key_warning(p, [r["name"] for r in meta.get("runs", [])])
            if warning:
                print(warning, file=sys.stderr)
            found = [(p / r["name"], p.name, r["label"], tuple(r.get("point") or ())) for r in meta.get("runs", [])
                     if (p / r["name"] / "metrics.csv").exists()]
        else:
            found = [(m.parent, "", None, ()) for m in sorted(p.rglob("metrics.csv"))]
        for d, sweep, label, point in found:
            if d.resolve() not in seen:
                seen.add(d.resolve())
                runs.append(load_run(d, sweep, label, point))
    return runs


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
            row[name] = mean_std([f[name] for f in figs])
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
            at = r.diverged_at or {}
            row["diverged_version"], row["diverged_time"] = at.get("version"), at.get("time")
            rows.append(row)
    return rows
