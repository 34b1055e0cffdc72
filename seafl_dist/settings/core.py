"""Typed run configuration: one dataclass per section, loaded from YAML with dotted overrides.

    cfg = load_config("configs/quickstart.yaml", ["algorithm.name=fedbuff", "run.seed=3"])

Every key has a default and its help (docs/configuration.md lists them all); an unknown key, a value of the wrong
type or an impossible value raises :class:`ConfigError`, whose message names the key, the
value and what is allowed. Components receive only the section they need (``cfg.algorithm``,
``cfg.clock``, ...); there is no global config object.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from seafl_dist.settings.domains import Interval, base_type, check_fields, describe, domain_of, optional
from seafl_dist.settings.files import find_config, is_sweep_file
from seafl_dist.settings.execution import LoggingConfig, RuntimeConfig, WandbConfig  # noqa: F401  (re-exported)
from seafl_dist.settings.sections import (  # noqa: F401  (re-exported: the public config API, see __all__)
    ALGORITHMS, SIMILARITY_MODES, SIMILARITY_OVER, AlgorithmConfig, ClockConfig, ConfigError, DataConfig, DevicesConfig,
    IdleConfig, ModelConfig, RunConfig, TrainConfig, DPSGDConfig,
)
from seafl_dist.settings.errors import _fail  # this module's own checks word their errors the same way
from seafl_dist.settings.keys import key, section
from seafl_dist.settings.compression import CompressionConfig
from seafl_dist.settings.privacy import AdaptiveClipConfig, PrivacyConfig
from seafl_dist.settings.threats import ThreatsConfig
from seafl_dist.settings.asyncsgd import AsyncSGDConfig
from seafl_dist.settings.port import PortConfig
from seafl_dist.settings.server_opt import ServerOptConfig
from seafl_dist.settings.ca2fl import Ca2flConfig
from seafl_dist.settings.fedstaleweight import FedStaleWeightConfig
from seafl_dist.settings.fedcompass import FedCompassConfig
from seafl_dist.settings.defense import DefenseConfig  # noqa: F401  (re-exported)
from seafl_dist.settings.across import check_across

__all__ = ["ALGORITHMS", "SIMILARITY_MODES", "SIMILARITY_OVER", "AlgorithmConfig", "ClockConfig", "Config", "ConfigError", "DataConfig",
           "DevicesConfig", "IdleConfig", "LoggingConfig", "ModelConfig", "RunConfig", "RuntimeConfig",
           "ServerOptConfig", "CompressionConfig", "PrivacyConfig", "TrainConfig", "WandbConfig", "all_keys",
           "config_from_dict", "dump_config",
           "find_config", "is_sweep_file", "load_config", "load_run_yaml", "load_yaml", "parse_override", "set_dotted"]


@dataclass(kw_only=True)
class Config:
    """A run's configuration: one section per part of the system, then the run's name."""

    algorithm: AlgorithmConfig = section(AlgorithmConfig, "which rule aggregates the buffer, and when")
    devices: DevicesConfig = section(DevicesConfig, "the simulated devices")
    train: TrainConfig = section(TrainConfig, "each device's local training (SGD)")
    clock: ClockConfig = section(ClockConfig, "the virtual clock: how long a job takes")
    compression: CompressionConfig = section(CompressionConfig, "what a device uploads: the model, or its "
                                             "compressed delta")
    privacy: PrivacyConfig = section(PrivacyConfig, "user-level differential privacy: clipping, noise, ε")
    threats: ThreatsConfig = section(ThreatsConfig, "malicious devices and their attacks (docs/robustness.md)")
    data: DataConfig = section(DataConfig, "the dataset and how it is split into devices' shards")
    model: ModelConfig = section(ModelConfig, "the model every device trains")
    run: RunConfig = section(RunConfig, "when the run stops, evaluates and checkpoints")
    runtime: RuntimeConfig = section(RuntimeConfig, "where and how the processes compute and communicate; may "
                                     "change on resume")
    logging: LoggingConfig = section(LoggingConfig, "progress lines and Weights & Biases; may change on resume")
    name: str = key("run", "the run's name: its default output dir (`runs/NAME-TIMESTAMP`) and W&B name",
                    shown="the config file's name (`run` without a file)")

    def __post_init__(self) -> None:
        check_fields(self, "")
        _resolve_algorithm(self.algorithm, self.devices)
        check_across(self)  # what one section's value asks of another's (settings/across.py)

    @property
    def data_seed(self) -> int:
        """The seed of the data split: ``data.seed``, or ``run.seed`` when it is not set."""
        return self.run.seed if self.data.seed is None else self.data.seed

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _resolve_algorithm(alg: AlgorithmConfig, dev: DevicesConfig) -> None:
    """Apply SPEC's special cases: FedAvg K=M, beta=0; FedAsync and asyncsgd K=1 (asyncsgd's τ_C: M unless given). FedBuff's and FedAsync's beta is
    infinity unless given (AlgorithmConfig resolves that): a finite one makes the server wait for
    stragglers as it does for SEAFL, the way PLATO ran the paper's baselines."""
    if alg.name == "fedavg":
        alg.buffer_size, alg.staleness_limit = dev.concurrency, 0
    elif alg.name in ("fedasync", "asyncsgd", "fedcompass"):  # fedcompass: its groups, not K, trigger (sim/compass.py)
        alg.buffer_size = 1
    alg.num_devices = dev.num  # N (null: the writers, resolved by runtime/setup.py's prepare)
    if alg.name == "asyncsgd" and alg.asyncsgd.tau_c is None:
        alg.asyncsgd.tau_c = dev.concurrency  # Koloskova et al.'s τ_C = n, the workers: M here


# ---- building dataclasses from plain dicts, with type checks ----------------------------

def _no_limit(value: Any, domain: Any) -> bool:
    """+inf (YAML's ``.inf``, or ``inf`` written as a word) for a key whose domain declares "no limit"."""
    inf = (isinstance(value, float) and value == math.inf) or \
        (isinstance(value, str) and value.lower() in ("inf", "+inf", "infinity", ".inf"))
    return inf and isinstance(domain, Interval) and domain.no_limit


_SCIENTIFIC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")  # 1e-6: YAML 1.1 reads it as a string (no dot)


def _coerce(key: str, tp: Any, value: Any, domain: Any = None) -> Any:
    """``value`` as the key's type; the domain itself is checked by the section (domains.check_fields)."""
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            _fail(key, value, f"a mapping of the keys of section '{key}'")
        return _build(tp, value, key + ".")
    if optional(tp) and (value is None or (isinstance(value, str) and value.lower() in ("null", "none"))
                         or _no_limit(value, domain)):
        return None
    kind = base_type(tp)
    if kind in (int, float) and isinstance(value, str) and _SCIENTIFIC.fullmatch(value):
        value = float(value)  # then as any number written with a dot (an int key takes it only when whole)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)  # a name or a path written as a number (`precision: 32`)
    if kind is list and not isinstance(value, (list, tuple, dict)):
        return [value]  # one item
    if kind is list and isinstance(value, tuple):
        return list(value)
    if kind in (int, float, str, bool, list) and not _is(value, kind):
        _fail(key, value, describe(domain, tp))
    return value


def _is(value: Any, kind: type) -> bool:
    if kind in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def _build(cls: type, data: dict, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            _unknown(prefix + str(key), value, sorted(fields))
        kwargs[key] = _coerce(prefix + key, hints[key], value, domain_of(fields[key], hints[key]))
    return cls(**kwargs)


def all_keys(cls: type = None, prefix: str = "") -> list[str]:
    """Every dotted key of a run config (sections by their own name too), in declaration order."""
    cls = cls or Config
    out = []
    for name, tp in typing.get_type_hints(cls).items():
        out.append(prefix + name)
        if dataclasses.is_dataclass(tp):
            out += all_keys(tp, prefix + name + ".")
    return out


def _unknown(key: str, value: Any, names: list[str]) -> None:
    """An unknown key, with the nearest known one (a typo's fix) and the keys of its section."""
    typed = key
    while isinstance(value, dict) and len(value) == 1:  # `trian.lr=3` arrives as trian: {lr: 3}
        inner, value = next(iter(value.items()))
        typed += f".{inner}"
    near = difflib.get_close_matches(typed, all_keys(), n=1, cutoff=0.6)
    hint = f"did you mean '{near[0]}'? " if near else ""
    where = "this section" if "." in key else "the top level"
    _fail(typed, value, f"known keys ({hint}keys of {where}: {', '.join(names)})")


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set ``value`` at the dotted key in a config tree of plain dicts, making the sections on the way."""
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            _fail(dotted, value, f"'{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value




def parse_override(text: str) -> tuple[str, Any]:
    """``'algorithm.buffer_size=5'`` → ``('algorithm.buffer_size', 5)`` (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key.sub=value (e.g. algorithm.buffer_size=5)")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def config_from_dict(data: dict, overrides: list[str] | tuple = ()) -> Config:
    tree = _deep_copy(data or {})
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(tree, key, value)
    cfg = _build(Config, tree)
    clock = tree.get("clock")
    if cfg.devices.profile is not None and not (isinstance(clock, dict) and "idle" in clock):
        # a profile carries each device's speed: idle times are added only when the config asks for them.
        # Resolved here, from the tree as written, so config.yaml records `none` and reloads the same
        cfg.clock.idle.distribution = "none"
    return cfg


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def load_yaml(path: str | Path) -> dict:
    """The mapping in a YAML file; ``path`` may also name a packaged config (``quickstart``)."""
    path = find_config(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file '{path}' is not valid YAML: {_yaml_problem(err)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of sections (algorithm:, devices:, ...)")
    return data


def load_run_yaml(path: str | Path) -> dict:
    """A run config file's tree, its name defaulting to the file's stem; a sweep file is refused, naming
    the command that runs it."""
    data = load_yaml(path)
    if is_sweep_file(data):
        has = " and ".join(f"{k}:" for k in ("base", "grid") if k in data)
        raise ConfigError(f"'{path}' is a sweep file (it has {has}), not a run config; run it with "
                          f"`seafl sweep {path}`")
    data.setdefault("name", find_config(path).stem)
    return data


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: where, then what."""
    mark, problem = getattr(err, "problem_mark", None), getattr(err, "problem", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem or err).split())


def load_config(path: str | Path, overrides: list[str] | tuple = ()) -> Config:
    """Load a YAML file, apply dotted overrides, validate. The run name defaults to the file stem. A refusal of a
    key whose value comes from the file (not from an override) names the file."""
    data = load_run_yaml(path)
    try:
        return config_from_dict(data, overrides)
    except ConfigError as err:
        named = re.match(r"config key '([^']+)'", str(err))
        overridden = {parse_override(text)[0] for text in overrides}
        if named and named.group(1) not in overridden and _holds(data, named.group(1)):
            raise ConfigError(f"{find_config(path)}: {err}") from None  # as --resume's refusals name it
        raise


def _holds(tree: dict, dotted: str) -> bool:
    """Whether a config tree of plain dicts sets the dotted key."""
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


# Keys of device populations (docs/devices.md), GPU switches, the Lightning loop's keys, FedProx's mu, the update
# guard, the divergence stop, the target metric and device evaluation (docs/device_eval.md) left out of config.yaml at
# their defaults, so the file of a run without them is byte for byte what it was before they existed (and older
# run dirs still compare equal).
OMITTED_AT_DEFAULT = {("devices", "profile"): None, ("devices", "dropout"): None,
                      ("devices", "availability_scale"): 1.0, ("clock", "compute_scale"): 1.0,
                      ("runtime", "deterministic"): False, ("runtime", "cuda_graphs"): True,
                      ("train", "loop"): "plain", ("train", "grad_clip_val"): None,
                      ("train", "grad_clip_algorithm"): None, ("train", "prox_mu"): 0.0,
                      ("algorithm", "update_norm_factor"): None, ("algorithm", "params"): None,
                      ("model", "params"): None, ("run", "stop_on_divergence"): False,
                      ("run", "target_metric"): "accuracy", ("run", "target_mode"): "max",
                      ("data", "device_holdout"): 0.0, ("data", "device_test"): "split", ("data", "validation"): 0.0,
                      ("data", "partition_by"): None, ("data", "files"): None, ("data", "columns"): None,
                      ("data", "splits"): None, ("data", "partition_args"): None,
                      ("run", "device_eval_every"): None, ("run", "device_eval_sample"): None,
                      ("algorithm", "server_opt", "delay_adaptive"): None,
                      ("algorithm", "server_opt", "delay_threshold"): ServerOptConfig().delay_threshold,
                      ("algorithm", "server_opt", "delay_c"): ServerOptConfig().delay_c}


# τ_C and c are recorded whenever the delay-adaptive η is on (fadas records its preset), left out otherwise
DELAY_KEYS = ("delay_threshold", "delay_c")


# Sections left out whole when every key is at its default (the server optimizer, algorithm.server_opt; asyncsgd's,
# CA²FL's, Port's and FedStaleWeight's keys; compression; privacy, then its adaptive clipping if privacy is there)
OMITTED_SECTIONS_AT_DEFAULT = {("algorithm", "server_opt"): ServerOptConfig, ("algorithm", "asyncsgd"): AsyncSGDConfig,
                               ("algorithm", "ca2fl"): Ca2flConfig, ("algorithm", "port"): PortConfig,
                               ("algorithm", "fedstaleweight"): FedStaleWeightConfig,
                               ("algorithm", "fedcompass"): FedCompassConfig,
                               ("algorithm", "defense"): DefenseConfig, ("train", "dp_sgd"): DPSGDConfig,
                               ("compression",): CompressionConfig, ("privacy",): PrivacyConfig,
                               ("privacy", "adaptive_clip"): AdaptiveClipConfig, ("threats",): ThreatsConfig}


def dump_config(cfg: Config) -> str:
    tree = cfg.to_dict()
    for path, cls in OMITTED_SECTIONS_AT_DEFAULT.items():
        parent = tree.get(path[0], {}) if len(path) == 2 else tree
        if path[-1] in parent and parent[path[-1]] == dataclasses.asdict(cls()):
            del parent[path[-1]]
    for (*sections, name), default in OMITTED_AT_DEFAULT.items():  # then the keys, of the sections still there
        node = tree
        for sec in sections:
            node = node.get(sec, {}) if isinstance(node, dict) else {}
        if name in node and node[name] == default and not (name in DELAY_KEYS and node.get("delay_adaptive")):
            del node[name]
    return yaml.safe_dump(tree, sort_keys=False)
