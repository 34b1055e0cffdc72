"""Typed run configuration: one dataclass per section, loaded from YAML with dotted overrides.

    cfg = load_config("configs/quickstart.yaml", ["algorithm.name=fedbuff", "run.seed=3"])

Every key has a default from SPEC.md ("Config keys"); an unknown key, a value of the wrong
type or an impossible value raises :class:`ConfigError`, whose message names the key, the
value and what is allowed. Components receive only the section they need (``cfg.algorithm``,
``cfg.clock``, ...); there is no global config object.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

ALGORITHMS = ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg")
SIMILARITY_MODES = ("delta_vs_global", "model_vs_global", "delta_vs_movement")


class ConfigError(ValueError):
    """A user mistake in the configuration; the CLI prints it without a traceback."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config key '{key}' has value {value!r}; allowed: {allowed}")


def _choice(key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        _fail(key, value, "one of " + ", ".join(map(str, choices)))


def _at_least(key: str, value: Any, low: float, *, strict: bool = False) -> None:
    if value is None:
        return
    if (value <= low) if strict else (value < low):
        _fail(key, value, f"a number {'>' if strict else '>='} {low}")


@dataclass(kw_only=True)
class AlgorithmConfig:
    """Which rule aggregates the buffer and when (SPEC "The server loop", "Aggregation rules")."""

    name: str = "seafl"  # seafl, seafl2, fedbuff, fedasync, fedavg
    buffer_size: int = 10  # K; fedavg forces K = M, fedasync K = 1
    staleness_limit: Optional[int] = 10  # beta; None = infinity (forced for fedbuff/fedasync; fedavg: 0)
    alpha: float = 3.0  # SEAFL staleness weight alpha (Eq. 4)
    mu: float = 1.0  # SEAFL importance weight mu (Eq. 5); 0 turns importance off
    theta: float = 0.8  # SEAFL server mixing vartheta (Eq. 8), in (0, 1]
    similarity: str = "delta_vs_global"  # which vectors Eq. 5's cosine compares
    server_lr: float = 1.0  # FedBuff server learning rate eta_g
    staleness_scaling: str = "none"  # FedBuff: none or sqrt (1/sqrt(1+S))
    mixing: float = 0.6  # FedAsync alpha_mix
    staleness_fn: str = "polynomial"  # FedAsync: constant, polynomial, hinge
    poly_a: float = 0.5  # FedAsync polynomial exponent
    hinge_a: float = 10.0  # FedAsync hinge slope
    hinge_b: float = 4.0  # FedAsync hinge threshold

    def __post_init__(self) -> None:
        _choice("algorithm.name", self.name, ALGORITHMS)
        _at_least("algorithm.buffer_size", self.buffer_size, 1)
        _at_least("algorithm.staleness_limit", self.staleness_limit, 0)
        _at_least("algorithm.alpha", self.alpha, 0)
        _at_least("algorithm.mu", self.mu, 0)
        if not 0 < self.theta <= 1:
            _fail("algorithm.theta", self.theta, "a number in (0, 1]")
        _choice("algorithm.similarity", self.similarity, SIMILARITY_MODES)
        _at_least("algorithm.server_lr", self.server_lr, 0, strict=True)
        _choice("algorithm.staleness_scaling", self.staleness_scaling, ("none", "sqrt"))
        if not 0 < self.mixing <= 1:
            _fail("algorithm.mixing", self.mixing, "a number in (0, 1]")
        _choice("algorithm.staleness_fn", self.staleness_fn, ("constant", "polynomial", "hinge"))
        _at_least("algorithm.poly_a", self.poly_a, 0)
        _at_least("algorithm.hinge_a", self.hinge_a, 0)
        _at_least("algorithm.hinge_b", self.hinge_b, 0)
        if self.name == "seafl" and self.alpha == 0 and self.mu == 0:
            _fail("algorithm.alpha", self.alpha, "alpha > 0 or mu > 0 (both 0 gives every update weight 0)")

    @property
    def partial_training(self) -> bool:
        """SEAFL² notifies blocking devices to upload early (SPEC server loop step 4)."""
        return self.name == "seafl2"

    @property
    def rule(self) -> str:
        """The aggregation rule; SEAFL² aggregates with SEAFL's rule."""
        return "seafl" if self.name == "seafl2" else self.name


@dataclass(kw_only=True)
class DevicesConfig:
    num: int = 100  # N simulated devices
    concurrency: int = 20  # M devices training at once

    def __post_init__(self) -> None:
        _at_least("devices.num", self.num, 1)
        _at_least("devices.concurrency", self.concurrency, 1)
        if self.concurrency > self.num:
            _fail("devices.concurrency", self.concurrency, f"at most devices.num ({self.num})")


@dataclass(kw_only=True)
class TrainConfig:
    epochs: int = 5  # E local epochs per job
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _at_least("train.epochs", self.epochs, 1)
        _at_least("train.batch_size", self.batch_size, 1)
        _at_least("train.lr", self.lr, 0, strict=True)
        _at_least("train.momentum", self.momentum, 0)
        _at_least("train.weight_decay", self.weight_decay, 0)


@dataclass(kw_only=True)
class IdleConfig:
    distribution: str = "zipf"  # zipf, pareto or none
    s: float = 1.7  # Zipf exponent
    a: float = 1.0  # Pareto (Lomax) shape
    max: float = 60.0  # cap on one idle time, seconds
    resample: str = "per_device"  # per_device (drawn once) or per_epoch

    def __post_init__(self) -> None:
        _choice("clock.idle.distribution", self.distribution, ("zipf", "pareto", "none"))
        if self.distribution == "zipf":
            _at_least("clock.idle.s", self.s, 1, strict=True)
        _at_least("clock.idle.a", self.a, 0, strict=True)
        _at_least("clock.idle.max", self.max, 0)
        _choice("clock.idle.resample", self.resample, ("per_device", "per_epoch"))


@dataclass(kw_only=True)
class ClockConfig:
    sec_per_sample: float = 0.001  # compute time per sample per epoch
    download_s: float = 0.0  # before epoch 1
    upload_s: float = 0.0  # after the last epoch
    idle: IdleConfig = field(default_factory=IdleConfig)

    def __post_init__(self) -> None:
        _at_least("clock.sec_per_sample", self.sec_per_sample, 0)
        _at_least("clock.download_s", self.download_s, 0)
        _at_least("clock.upload_s", self.upload_s, 0)


@dataclass(kw_only=True)
class DataConfig:
    name: str = "digits"  # digits (bundled), mnist, emnist, cifar10, cinic10
    root: str = "data"  # where on-disk datasets live
    download: bool = False  # fetch missing datasets (needs internet)
    partition: str = "dirichlet"  # dirichlet or iid
    concentration: float = 0.3  # Dirichlet concentration over labels
    samples_per_device: Optional[int] = None  # fixed shard size, drawn without replacement
    test_fraction: float = 0.2  # digits only: seeded held-out share
    emnist_split: str = "balanced"
    augment: bool = False  # CIFAR-style random crop + flip at train time

    def __post_init__(self) -> None:
        _choice("data.name", self.name, ("digits", "mnist", "emnist", "cifar10", "cinic10"))
        _choice("data.partition", self.partition, ("dirichlet", "iid"))
        _at_least("data.concentration", self.concentration, 0, strict=True)
        _at_least("data.samples_per_device", self.samples_per_device, 1)
        if not 0 < self.test_fraction < 1:
            _fail("data.test_fraction", self.test_fraction, "a number in (0, 1)")


@dataclass(kw_only=True)
class ModelConfig:
    name: str = "lenet5"  # lenet5, resnet18, vgg16
    width: float = 1.0  # channel multiplier (tests use small widths)

    def __post_init__(self) -> None:
        _choice("model.name", self.name, ("lenet5", "resnet18", "vgg16"))
        _at_least("model.width", self.width, 0, strict=True)


@dataclass(kw_only=True)
class RunConfig:
    seed: int = 0
    max_aggregations: Optional[int] = 200
    max_time: Optional[float] = None  # virtual seconds
    target_accuracy: Optional[float] = None  # stop once test accuracy reaches it
    eval_every: int = 1  # evaluate after every n-th aggregation (and the last)
    targets: list = field(default_factory=lambda: [0.5, 0.7, 0.9])  # reported times-to-accuracy

    def __post_init__(self) -> None:
        _at_least("run.max_aggregations", self.max_aggregations, 1)
        _at_least("run.max_time", self.max_time, 0, strict=True)
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            _fail("run.target_accuracy", self.target_accuracy, "a number in (0, 1] or null")
        _at_least("run.eval_every", self.eval_every, 1)
        for t in self.targets:
            if not isinstance(t, (int, float)) or not 0 < t <= 1:
                _fail("run.targets", self.targets, "a list of accuracies in (0, 1]")
        if self.max_aggregations is None and self.max_time is None and self.target_accuracy is None:
            _fail("run.max_aggregations", None, "a number, unless run.max_time or run.target_accuracy is set")


@dataclass(kw_only=True)
class RuntimeConfig:
    device: str = "auto"  # auto, cpu, cuda
    backend: str = "auto"  # auto, gloo, nccl (distributed transport)
    timeout_s: float = 600.0  # a silent worker is declared dead after this many seconds
    precision: str = "32"  # 32 or bf16 (autocast on GPU)
    threads: Optional[int] = None  # torch intra-op threads per process (None: torch's default)

    def __post_init__(self) -> None:
        _choice("runtime.device", self.device, ("auto", "cpu", "cuda"))
        _choice("runtime.backend", self.backend, ("auto", "gloo", "nccl"))
        _at_least("runtime.timeout_s", self.timeout_s, 0, strict=True)
        _choice("runtime.precision", self.precision, ("32", "bf16"))
        _at_least("runtime.threads", self.threads, 1)


@dataclass(kw_only=True)
class WandbConfig:
    enabled: bool = False
    mode: str = "offline"  # online, offline, disabled
    project: str = "seafl"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: list = field(default_factory=list)

    def __post_init__(self) -> None:
        _choice("logging.wandb.mode", self.mode, ("online", "offline", "disabled"))


@dataclass(kw_only=True)
class LoggingConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: str = "auto"  # auto (bar on a terminal, lines otherwise), bar, lines, none
    progress_every_s: float = 10.0  # real seconds between plain progress lines

    def __post_init__(self) -> None:
        _choice("logging.progress", self.progress, ("auto", "bar", "lines", "none"))
        _at_least("logging.progress_every_s", self.progress_every_s, 0)


@dataclass(kw_only=True)
class Config:
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    clock: ClockConfig = field(default_factory=ClockConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    run: RunConfig = field(default_factory=RunConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    name: str = "run"  # used for the default output dir

    def __post_init__(self) -> None:
        _resolve_algorithm(self.algorithm, self.devices)
        if self.algorithm.buffer_size > self.devices.concurrency:
            _fail("algorithm.buffer_size", self.algorithm.buffer_size,
                  f"at most devices.concurrency ({self.devices.concurrency}), or the buffer never fills")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _resolve_algorithm(alg: AlgorithmConfig, dev: DevicesConfig) -> None:
    """Apply SPEC's special cases: FedAvg K=M, beta=0; FedAsync K=1, beta=inf; FedBuff beta=inf."""
    if alg.name == "fedavg":
        alg.buffer_size, alg.staleness_limit = dev.concurrency, 0
    elif alg.name == "fedasync":
        alg.buffer_size, alg.staleness_limit = 1, None
    elif alg.name == "fedbuff":
        alg.staleness_limit = None


# ---- building dataclasses from plain dicts, with type checks ----------------------------

def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _coerce(key: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "inf", "infinity")
                             and type(None) in typing.get_args(tp)):
            return None
        if isinstance(value, float) and math.isinf(value):
            return None
        return _coerce(key, args[0], value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            _fail(key, value, f"a mapping of the keys of section '{key}'")
        return _build(tp, value, key + ".")
    if tp is bool:
        if isinstance(value, bool):
            return value
        _fail(key, value, "true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        _fail(key, value, "an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        _fail(key, value, "a number")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        _fail(key, value, "a string")
    if tp is list or origin is list:
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, (int, float, str)):
            return [value]
        _fail(key, value, "a list")
    return value


def _build(cls: type, data: dict, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            _fail(prefix + str(key), value, "known keys of this section: " + ", ".join(sorted(names)))
        kwargs[key] = _coerce(prefix + key, hints[key], value)
    return cls(**kwargs)


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
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
        _set_dotted(tree, key, value)
    return _build(Config, tree)


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist; pass the path of a YAML file such as configs/quickstart.yaml")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file '{path}' is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of sections (algorithm:, devices:, ...)")
    return data


def load_config(path: str | Path, overrides: list[str] | tuple = ()) -> Config:
    """Load a YAML file, apply dotted overrides, validate. The run name defaults to the file stem."""
    data = load_yaml(path)
    data.setdefault("name", Path(path).stem)
    return config_from_dict(data, overrides)


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
