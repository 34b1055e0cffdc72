"""Finished runs read back for the report: ``find_runs`` (a run dir, a sweep dir, or a dir of run dirs)
gives one :class:`RunResult` per run, from its own ``config.yaml``, ``metrics.csv`` and ``summary.json``
(report/tables.py groups them and makes the tables).
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from seafl_dist.report.metric import Metric
from seafl_dist.report.sinks import read_config, read_metrics, read_summary, time_to_target
from seafl_dist.settings import ConfigError


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

    @property
    def withheld(self) -> bool:
        """Run under DP without ``privacy.diagnostics``: the report shows no real time of it (docs/privacy.md, "No
        wall-clock channel"), not even one that a summary.json written before seafl withheld it still holds."""
        return bool(self.config.get("privacy.enabled")) and not self.config.get("privacy.diagnostics")

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
            "wall_time_s": math.nan if self.withheld else s.get("wall_time_s", math.nan),
            **({"epsilon": math.inf if priv.get("epsilon") is None else priv["epsilon"]}  # DP runs only (∞: z = 0)
               if (priv := s.get("privacy")) else {}),
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
