"""Sweep files: one base config, a grid of settings, a list of seeds → one run per combination.

    seafl sweep configs/digits/buffer_size.yaml --jobs 2
    seafl sweep configs/quickstart.yaml --grid algorithm.name=seafl,fedbuff --seeds 0,1,2

A sweep file is YAML with these top-level keys (all optional except that a sweep file has
``base`` or ``grid``; a plain run config given to ``seafl sweep`` needs ``--grid`` or ``--seeds``,
and a sweep file given to ``seafl run`` is refused naming ``seafl sweep``):

```yaml
base: ../mnist_prelim.yaml      # run config to start from, relative to this file, or a packaged name (quickstart)
name: buffer_size               # sweep name: output dir runs/<name>, W&B group (default: file stem)
algorithm: {theta: 0.8}         # inline config sections, merged over base (any section of a run config)
overrides: [run.max_aggregations=300]   # dotted overrides applied to every run, in order
grid:                           # cross product of dotted keys → values (YAML values; null = ∞)
  algorithm.buffer_size: [1, 5, 10, 15, 20]
points:                         # optional explicit points, crossed with grid; `label` names one
  - {label: seafl2-beta3, algorithm.name: seafl2, algorithm.staleness_limit: 3}
  - {label: fedbuff, algorithm.name: fedbuff}
seeds: [0, 1, 2]                # run.seed of each repetition (default: the base config's seed)
targets: [0.9, 0.95]            # accuracies to report time-to-target for (sets run.targets)
baseline: fedbuff               # report: the point label, or algorithm name, ratios are taken against
launcher: torchrun --standalone --nproc_per_node=4   # replaces `python` in each run's command
```

A run's config is: base → inline sections → ``overrides`` → the point's values → ``run.seed``.
Command-line ``--grid key=v1,v2`` adds (or replaces) a grid key, ``--seeds`` replaces the seeds
and positional ``key=value`` items are appended to ``overrides``; a grid (or override) over ``run.seed``
is the seeds (docs/sweeps.md: the keys the sweep sets itself). Every point is validated before
anything runs. A run's directory is named from its point and seed, e.g. ``buffer_size=10,seed=0``
(the last part of each dotted key, the section for ``*.name`` keys, the whole key where two clash
or where it would be ``seed``).
"""
from __future__ import annotations

import copy
import difflib
import itertools
import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seafl_dist.experiments.arguments import parse_grid_arg, parse_seeds, split_top_level  # noqa: F401 (their home before)
from seafl_dist.report.runs import repeated_keys
from seafl_dist.settings import (Config, ConfigError, config_from_dict, find_config,  # noqa: F401 (is_sweep_file:
                                 is_sweep_file, load_yaml, parse_override, set_dotted)  # its home before)
from seafl_dist.settings.files import packaged, packaged_config, packaged_names

SWEEP_KEYS = ("base", "name", "overrides", "grid", "points", "seeds", "targets", "baseline", "launcher")
CONFIG_SECTIONS = tuple(Config.__dataclass_fields__)


def format_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def safe_name(text: str) -> str:
    """A directory name that needs no quoting in a shell."""
    return re.sub(r"[^A-Za-z0-9._=+,-]", "_", text)


@dataclass
class SweepRun:
    """One run of a sweep: a grid point at one seed."""

    name: str  # directory name, e.g. "buffer_size=10,seed=0"
    label: str  # the grid point without the seed, e.g. "buffer_size=10"
    point: dict  # dotted key → value
    seed: int
    config: Config


@dataclass
class Sweep:
    name: str
    base: dict  # config tree (base file + inline sections)
    overrides: list = field(default_factory=list)
    grid: dict = field(default_factory=dict)
    points: list = field(default_factory=list)
    seeds: list | None = None
    targets: list | None = None
    baseline: str | None = None
    launcher: list = field(default_factory=list)
    source: str | None = None

    def _short_names(self) -> dict:
        keys = dict.fromkeys(list(self.grid) + [k for p in self.points for k in p if k != "label"])
        last = {k: k.split(".")[-2] if k.endswith(".name") and "." in k else k.rsplit(".", 1)[-1] for k in keys}
        taken = [*last.values(), "seed"]  # every run's name ends in seed=S: data.seed is named in full
        return {k: s if taken.count(s) == 1 else k for k, s in last.items()}

    def expand(self, *, threads: int | None = None) -> list[SweepRun]:
        """Every run, seeds outermost (seed 0 of every point first), each config validated."""
        short = self._short_names()
        combos = [dict(zip(self.grid, vals)) for vals in itertools.product(*self.grid.values())] or [{}]
        points = self.points or [{}]
        seeds = self.seeds if self.seeds is not None else [self.base.get("run", {}).get("seed", 0)]
        runs, seen = [], set()
        for seed in seeds:
            for p in points:
                for g in combos:
                    values = {**{k: v for k, v in p.items() if k != "label"}, **g}
                    parts = ([str(p["label"])] if "label" in p else
                             [f"{short[k]}={format_value(v)}" for k, v in p.items()]) + \
                            [f"{short[k]}={format_value(v)}" for k, v in g.items()]
                    label = ",".join(parts) or "base"
                    name = safe_name(f"{label},seed={seed}" if parts else f"seed={seed}")
                    if repeated_keys(name):
                        raise ConfigError(f"sweep '{self.name}': the run directory {name!r} names "
                                          f"{', '.join(repeated_keys(name))} twice; give the point another label")
                    if name in seen:
                        raise ConfigError(f"sweep '{self.name}': two runs would share the directory {name!r}; "
                                          "give the points distinct labels")
                    seen.add(name)
                    runs.append(SweepRun(name, label, values, seed, self._config(name, values, seed, threads)))
        one_metric(self.name, runs)
        self._check_baseline(runs)
        for line in dict.fromkeys(r.config.algorithm.limit_line() for r in runs):  # each rule's once; its runs'
            if line:  # configs hold β, so they do not say it again
                print(line, file=sys.stderr)
        return with_job_types(runs)

    def _check_baseline(self, runs: list[SweepRun]) -> None:
        """``baseline`` names one grid point (its label, or the algorithm of one point) as the report takes it:
        else it would leave the report's "vs" columns out without a word (report/tables.py ``baseline_problem``)."""
        from seafl_dist.report.tables import baseline_problem
        if self.baseline is None:
            return
        points = {r.label: str(r.config.algorithm.name) for r in runs}
        why = baseline_problem(str(self.baseline), list(points), list(points.values()))
        if why:
            raise ConfigError(f"sweep '{self.name}': baseline {self.baseline!r} {why}")

    def _config(self, run_name: str, values: dict, seed: int, threads: int | None) -> Config:
        tree = copy.deepcopy(self.base)
        try:
            for text in self.overrides:
                set_dotted(tree, *parse_override(text))
            for key, value in values.items():
                set_dotted(tree, key, copy.deepcopy(value))
            set_dotted(tree, "run.seed", seed)
            if self.targets is not None:
                set_dotted(tree, "run.targets", list(self.targets))
            wandb = tree.setdefault("logging", {}).setdefault("wandb", {})
            if isinstance(wandb, dict) and not wandb.get("group"):
                wandb["group"] = self.name
            if threads and not tree.get("runtime", {}).get("threads"):
                set_dotted(tree, "runtime.threads", threads)
            tree["name"] = f"{self.name}-{run_name}"
            return config_from_dict(tree)
        except ConfigError as err:
            raise ConfigError(f"sweep '{self.name}', run {run_name}: {err}") from None

    def describe(self) -> dict:
        return {"name": self.name, "source": self.source, "overrides": self.overrides, "grid": self.grid,
                "points": self.points, "seeds": self.seeds, "targets": self.targets, "baseline": self.baseline,
                "launcher": self.launcher}


def one_metric(sweep: str, runs: list[SweepRun]) -> None:
    """A sweep's runs follow one target metric (run.target_metric, run.target_mode): its report compares their
    times to target and draws their curves on one axis."""
    seen: dict = {}
    for r in runs:
        seen.setdefault((r.config.run.target_metric, r.config.run.target_mode), r.name)
    if len(seen) > 1:
        raise ConfigError(f"sweep '{sweep}': its runs follow different target metrics (" + "; ".join(
            f"{m} ({mode}) in {name}" for (m, mode), name in seen.items()) + "); vary run.target_metric and "
            "run.target_mode in separate sweeps")


def with_job_types(runs: list[SweepRun]) -> list[SweepRun]:
    """Each run's W&B job type, unless its config sets one: its grid point's label in the reader's words
    ("SEAFL, K = 10", report/labels.py), so W&B's UI can draw a mean and band per point of the group."""
    from seafl_dist.report.labels import reader_labels
    from seafl_dist.report.runs import flatten
    points = {r.label: flatten(r.config.to_dict()) for r in runs}  # one config per grid point
    names = dict(zip(points, reader_labels(list(points.values()))))
    for r in runs:
        if r.config.logging.wandb.job_type is None:
            r.config.logging.wandb.job_type = names[r.label]
    return runs


def run_overrides(run: SweepRun) -> list[str]:
    """The dotted overrides that make ``run`` out of the sweep's common config (its point, then its seed)."""
    def text(v):  # exact floats here (names round them with format_value)
        return repr(v) if isinstance(v, float) else format_value(v)
    return [f"{k}={text(v)}" for k, v in run.point.items()] + [f"run.seed={run.seed}"]


def _merge(dst: dict, src: dict) -> dict:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


def _check_list(key: str, value: Any, path: Path) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"sweep file '{path}': '{key}' must be a list, got {value!r}")
    return value


def load_sweep(path: str | Path, *, grid: list[tuple[str, list]] = (), seeds: list[int] | None = None,
               overrides: list[str] = (), name: str | None = None) -> Sweep:
    """A sweep from a sweep file or a plain run config, plus command-line grid/seeds/overrides."""
    path = find_config(path)  # a path, or a packaged config's name (digits/buffer_size)
    data = load_yaml(path)
    if is_sweep_file(data):
        unknown = set(data) - set(SWEEP_KEYS) - set(CONFIG_SECTIONS)
        if unknown:
            raise ConfigError(f"sweep file '{path}': unknown key(s) {', '.join(sorted(map(str, unknown)))}; allowed: "
                              + ", ".join(SWEEP_KEYS) + " and the config sections " + ", ".join(CONFIG_SECTIONS))
        base: dict = {}
        if data.get("base"):
            base = load_yaml(base_path(path, str(data["base"])))
            if is_sweep_file(base):
                raise ConfigError(f"sweep file '{path}': base '{data['base']}' is itself a sweep; base must be a run config")
        _merge(base, {k: v for k, v in data.items() if k in CONFIG_SECTIONS})
        sweep_grid = data.get("grid") or {}
        if not isinstance(sweep_grid, dict):
            raise ConfigError(f"sweep file '{path}': 'grid' must map dotted keys to lists of values")
        sweep_grid = {str(k): (v if isinstance(v, list) else [v]) for k, v in sweep_grid.items()}
        points = _check_list("points", data.get("points"), path)
        if not all(isinstance(p, dict) for p in points):
            raise ConfigError(f"sweep file '{path}': every entry of 'points' must be a mapping of dotted keys")
        launcher = data.get("launcher") or []
        sweep = Sweep(name=str(data.get("name") or path.stem), base=base,
                      overrides=[str(o) for o in _check_list("overrides", data.get("overrides"), path)],
                      grid=sweep_grid, points=points, seeds=data.get("seeds"), targets=data.get("targets"),
                      baseline=data.get("baseline"), source=str(path),
                      launcher=shlex.split(launcher) if isinstance(launcher, str) else [str(x) for x in launcher])
        if sweep.seeds is not None:
            sweep.seeds = [int(s) for s in _check_list("seeds", sweep.seeds, path)]
        if sweep.targets is not None:
            sweep.targets = [float(t) for t in _check_list("targets", sweep.targets, path)]
    else:
        base = data
        sweep = Sweep(name=str(data.get("name") or path.stem), base=base, source=str(path))
    if name:
        sweep.name = name
    for key, values in grid:
        sweep.grid[key] = list(values)
    if seeds is not None:
        sweep.seeds = list(seeds)
    sweep.overrides = list(sweep.overrides) + list(overrides)
    _claim_own_keys(sweep)
    if not is_sweep_file(data) and not sweep.grid and sweep.seeds is None:
        raise ConfigError(f"'{path}' is a run config, not a sweep file (it has no base: or grid:), and nothing varies "
                          f"(no --grid, no --seeds); run it with `seafl run {path}`, or sweep it with --grid KEY=V1,V2 "
                          f"or --seeds 0,1,2")
    return sweep


def base_path(sweep_file: Path, base: str) -> Path:
    """A sweep's ``base:``: a run config's path relative to the sweep file, else a packaged config's name
    (``quickstart``, ``mnist/study``); ConfigError saying both were tried if neither."""
    beside = (sweep_file.parent / base).resolve()
    found = beside if beside.is_file() else packaged_config(base)
    if found is None:
        near = difflib.get_close_matches(base, packaged(), n=1, cutoff=0.6)
        raise ConfigError(f"sweep file '{sweep_file}': base '{base}' is neither a file beside it ({beside} does not "
                          f"exist) nor the name of a packaged config; give a path relative to the sweep file, or "
                          + (f"did you mean {near[0]!r}? " if near else "") + f"one of: {packaged_names()}")
    return found


def _claim_own_keys(sweep: Sweep) -> None:
    """The keys the sweep sets itself, given by the user too (docs/sweeps.md): run.seed in the grid or
    the overrides becomes the seeds, once; run.targets beside ``targets`` and ``name`` anywhere but the
    base are refused. logging.wandb.group and runtime.threads need nothing: a user's value is kept."""
    where = f"sweep '{sweep.name}'"
    given = {key: [value for k, value in map(parse_override, sweep.overrides) if k == key]
             for key in ("run.seed", "run.targets", "name")}
    for key in ("run.seed", "run.targets", "name"):
        if any(key in p for p in sweep.points):
            raise ConfigError(f"{where}: a point sets {key}, which the sweep sets for every run; "
                              + _OWN_FIX[key])
    if "name" in sweep.grid or given["name"]:
        raise ConfigError(f"{where}: name is set by the sweep for every run (<sweep>-<run dir>); " + _OWN_FIX["name"])
    if sweep.targets is not None and ("run.targets" in sweep.grid or given["run.targets"]):
        raise ConfigError(f"{where}: run.targets is given twice, as targets: {sweep.targets} and as an override or "
                          f"grid key; " + _OWN_FIX["run.targets"])
    grid_seeds, over_seeds = sweep.grid.pop("run.seed", None), given["run.seed"]
    if grid_seeds is None and not over_seeds:
        return
    how = f"--grid run.seed={','.join(map(format_value, grid_seeds))}" if grid_seeds is not None else \
        f"run.seed={format_value(over_seeds[-1])}"
    if sweep.seeds is not None or (grid_seeds is not None and over_seeds):
        raise ConfigError(f"{where}: the seeds are given twice, as {how} and as "
                          + (f"seeds {sweep.seeds} (--seeds or seeds:)" if sweep.seeds is not None else
                             f"run.seed={format_value(over_seeds[-1])}") + "; " + _OWN_FIX["run.seed"])
    values = grid_seeds if grid_seeds is not None else over_seeds[-1:]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ConfigError(f"{where}: {how}: a seed must be an integer; " + _OWN_FIX["run.seed"])
    sweep.seeds = list(dict.fromkeys(values))
    sweep.overrides = [o for o in sweep.overrides if parse_override(o)[0] != "run.seed"]


_OWN_FIX = {"run.seed": "give the seeds once: --seeds 0,1 (or seeds: [0, 1] in the sweep file, or --grid run.seed=0,1)",
            "run.targets": "give them once: --target on `seafl report`, targets: [...] in the sweep file, or "
                           "run.targets=[...] without targets:",
            "name": "name the sweep with --name or name: in the sweep file"}
