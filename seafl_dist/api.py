"""The Python API: run an experiment or a sweep, and read a run back, without the command line.

    import seafl_dist
    summary = seafl_dist.run("quickstart", out="runs/qs", algorithm__name="fedbuff", run__seed=1)
    summary = seafl_dist.run("configs/quickstart.yaml", **{"algorithm.buffer_size": 3})
    result = seafl_dist.sweep("quickstart", grid={"algorithm.name": ["seafl", "fedbuff"]}, seeds=[0, 1], jobs=2)
    r = seafl_dist.load_run("runs/qs")       # r.config, r.metrics, r.events, r.summary, r.partition

``config`` is a path or packaged name (as for ``seafl run``), a dict of sections, or a
:class:`~seafl_dist.settings.Config`. Overrides are keyword arguments named by dotted key, with
``__`` for the dot (``algorithm__buffer_size=5``), or a section's dict (``algorithm={"name":
"fedbuff"}``); values are Python values, validated as the YAML ones are. Under ``torchrun`` every
rank calls :func:`run` and the run is distributed (rank 0 returns the summary, the others None).
Torch is imported only when a run starts.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seafl_dist.report.sinks import read_config, read_summary
from seafl_dist.runtime.launch import RunFailed  # noqa: F401 (re-exported by seafl_dist; imports no torch)
from seafl_dist.runtime.signals import RunInterrupted, SweepSignal  # noqa: F401
from seafl_dist.settings import Config, ConfigError, set_dotted, config_from_dict, load_run_yaml

SECTIONS = tuple(Config.__dataclass_fields__)


def _dotted(overrides: dict) -> list[tuple[str, Any]]:
    """``algorithm__name=x`` / ``algorithm={"name": x}`` / ``{"algorithm.name": x}`` as (dotted key, value)."""
    out = []
    for key, value in overrides.items():
        key = key.replace("__", ".")
        if "." not in key and key in SECTIONS and isinstance(value, dict):
            out += _dotted({f"{key}.{k}": v for k, v in value.items()})
        else:
            out.append((key, value))
    return out


def _tree(config) -> dict:
    if isinstance(config, Config):
        return config.to_dict()
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if isinstance(config, (str, Path)):
        return load_run_yaml(config)  # a sweep file is refused, naming seafl_dist.sweep's command
    raise ConfigError(f"config {config!r} is not a path, a packaged config's name, a dict or a Config")


def make_config(config, **overrides) -> Config:
    """The validated Config of ``config`` (path, name, dict or Config) with keyword overrides applied."""
    tree = _tree(config)
    for key, value in _dotted(overrides):
        set_dotted(tree, key, copy.deepcopy(value))
    return config_from_dict(tree)


def run(config, *, out: str | Path | None = None, overwrite: bool = False, **overrides) -> dict | None:
    """Run one experiment and return its summary (what ``summary.json`` holds).

    ``out`` is the run directory (default ``runs/<name>-<timestamp>``); as with ``seafl run --out``,
    a dir holding a checkpoint of the same config is resumed, a completed one returned as it is, and
    a dir holding a run of another config raises :class:`~seafl_dist.settings.ConfigError` unless
    ``overwrite=True`` (then that run's files are deleted first), as does a dir another live run
    holds (:class:`~seafl_dist.runtime.runlock.RunDirBusy`). In one process unless started by
    torchrun (WORLD_SIZE > 1): then every rank must call this, and only rank 0 gets the summary (the
    others None); under ``torchrun --max-restarts`` a lost rank's attempt resumes from the last
    checkpoint by itself.

    Signals, as ``seafl run``: SIGTERM, SIGINT (Ctrl-C) and SIGUSR1 make rank 0 write a checkpoint
    and summary.json (status ``interrupted``), then :class:`~seafl_dist.RunInterrupted` (a
    ``KeyboardInterrupt``) is raised on every rank; calling ``run`` again resumes. Your own signal
    handlers are back when ``run`` returns or raises. Off the main thread no handler can be
    installed: the run goes on without them and says so once.

    Raises :class:`~seafl_dist.RunFailed` on every rank when the run fails (after summary.json
    says ``failed``; the last checkpoint is kept) and :class:`~seafl_dist.settings.ConfigError` (a
    one-line message) for a bad config, before anything trains. Nothing ends your process."""
    cfg = make_config(config, **overrides)
    from seafl_dist.runtime.launch import launch
    return launch(cfg, Path(out) if out is not None else None, overwrite=overwrite)


def sweep(config, *, grid: dict | None = None, seeds: list[int] | None = None, out: str | Path | None = None,
          jobs: int = 1, name: str | None = None, launcher: list[str] | str | None = None, report: bool = True,
          **overrides) -> dict:
    """Run a sweep (as ``seafl sweep``): every point of ``grid`` (dotted key → values) at every seed,
    each run its own process, ``jobs`` at a time, resumable. ``config`` is a run config or a sweep
    file (path or packaged name), a dict of sections, or a Config; overrides as for :func:`run`.

    Returns ``{"dir": Path, "ok": bool, "runs": {run name: its summary, or None if it wrote none}}``."""
    import shlex

    from seafl_dist.experiments import load_sweep, run_sweep
    from seafl_dist.experiments.sweep import Sweep
    texts = [f"{k}={json.dumps(v)}" for k, v in _dotted(overrides)]  # JSON is YAML, as the CLI's values are
    axes = [(k.replace("__", "."), list(v) if isinstance(v, (list, tuple)) else [v]) for k, v in (grid or {}).items()]
    if isinstance(config, (str, Path)):
        sw = load_sweep(config, grid=axes, seeds=seeds, overrides=texts, name=name)
    else:
        tree = _tree(config)
        sw = Sweep(name=name or str(tree.get("name") or "sweep"), base=tree, overrides=texts, grid=dict(axes),
                   seeds=list(seeds) if seeds is not None else None)
    if launcher:
        sw.launcher = shlex.split(launcher) if isinstance(launcher, str) else list(launcher)
    out_dir = Path(out) if out is not None else Path("runs") / sw.name
    code = run_sweep(sw, out_dir, jobs=jobs, report=report)
    names = [r["name"] for r in json.loads((out_dir / "sweep.json").read_text())["runs"]]
    return {"dir": out_dir, "ok": code == 0, "runs": {n: read_summary(out_dir / n) for n in names}}


@dataclass
class Run:
    """A run directory read back: ``config`` (the resolved config as a dict of sections), ``metrics``
    (one dict per evaluation, numbers parsed), ``events`` (the trace), ``summary``, ``partition``."""

    dir: Path
    config: dict = field(repr=False)
    metrics: list[dict] = field(repr=False)
    events: list[dict] = field(repr=False)
    summary: dict | None
    partition: dict | None = field(default=None, repr=False)

    def to_config(self) -> Config:
        """The run's config as a Config (its import paths, if any, must be importable here)."""
        return config_from_dict(self.config)


def load_run(run_dir: str | Path) -> Run:
    """Everything a run wrote, in one call. A file the run did not get to write (a run that failed
    early) reads as empty (metrics, events) or None (summary, partition)."""
    from seafl_dist.report.partition import read_partition
    from seafl_dist.report.sinks import read_events, read_metrics
    d = Path(run_dir)
    config = read_config(d) if (d / "config.yaml").is_file() else None
    if config is None:
        raise FileNotFoundError(f"{d} is not a run directory: it has no readable config.yaml (a run writes it first)")
    metrics = read_metrics(d / "metrics.csv") if (d / "metrics.csv").is_file() else []
    events = read_events(d / "events.jsonl") if (d / "events.jsonl").is_file() else []
    return Run(d, config, metrics, events, read_summary(d), read_partition(d))
