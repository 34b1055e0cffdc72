"""The sections of a run configuration: one kw-only dataclass each, checked in ``__post_init__``.

Defaults follow the paper's setup (README, "Configuration"); every check names the key, the value and what is
allowed (:class:`ConfigError`). :mod:`seafl_dist.settings.core` assembles them and loads YAML.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from seafl_dist.settings import plugins
from seafl_dist.settings.errors import ConfigError, _fail  # noqa: F401  (ConfigError re-exported)

ALGORITHMS = ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg")
SIMILARITY_MODES = ("delta_vs_global", "model_vs_global", "delta_vs_movement")
SIMILARITY_OVER = ("parameters", "parameters_and_stats")


class _Unset:
    """The default of a key whose value depends on another key (``algorithm.staleness_limit`` on the name)."""

    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()


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

    name: str = "seafl"  # seafl, seafl2, fedbuff, fedasync, fedavg, or pkg.module:rule (seafl_dist.settings.plugins)
    buffer_size: int = 10  # K; fedavg forces K = M, fedasync K = 1
    # beta; None = infinity. Not given: 10 for seafl/seafl2, infinity for fedbuff/fedasync; a value given
    # (file or override) is kept for them too (PLATO's staleness_bound); fedavg: forced to 0
    staleness_limit: Optional[int] = UNSET
    alpha: float = 3.0  # SEAFL staleness weight alpha (Eq. 4)
    mu: float = 1.0  # SEAFL importance weight mu (Eq. 5); 0 turns importance off
    theta: float = 0.8  # SEAFL server mixing vartheta (Eq. 8), in (0, 1]
    similarity: str = "delta_vs_global"  # which vectors Eq. 5's cosine compares
    similarity_over: str = "parameters"  # its entries: parameters, or parameters_and_stats (never counters)
    server_lr: float = 1.0  # FedBuff server learning rate eta_g
    staleness_scaling: str = "none"  # FedBuff: none or sqrt (1/sqrt(1+S))
    mixing: float = 0.6  # FedAsync alpha_mix
    staleness_fn: str = "polynomial"  # FedAsync: constant, polynomial, hinge
    poly_a: float = 0.5  # FedAsync polynomial exponent
    hinge_a: float = 10.0  # FedAsync hinge slope
    hinge_b: float = 4.0  # FedAsync hinge threshold
    partial: Optional[bool] = None  # notify blocking devices to upload early; None: only for seafl2

    def __post_init__(self) -> None:
        plugins.check("algorithm.name", self.name, ALGORITHMS)
        if self.staleness_limit is UNSET:
            self.staleness_limit = None if self.name in ("fedbuff", "fedasync") else 10
        _at_least("algorithm.buffer_size", self.buffer_size, 1)
        _at_least("algorithm.staleness_limit", self.staleness_limit, 0)
        _at_least("algorithm.alpha", self.alpha, 0)
        _at_least("algorithm.mu", self.mu, 0)
        if not 0 < self.theta <= 1:
            _fail("algorithm.theta", self.theta, "a number in (0, 1]")
        _choice("algorithm.similarity", self.similarity, SIMILARITY_MODES)
        _choice("algorithm.similarity_over", self.similarity_over, SIMILARITY_OVER)
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
        if self.name == "seafl2" and self.partial is False:
            _fail("algorithm.partial", self.partial, "true or null for seafl2 (SEAFL² is SEAFL with partial "
                  "training; algorithm.name=seafl has none)")

    @property
    def partial_training(self) -> bool:
        """SEAFL² notifies blocking devices to upload early (SPEC server loop step 4); ``partial``
        turns the same on for another rule (a custom one, say)."""
        return self.name == "seafl2" or bool(self.partial)

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
    name: str = "digits"  # digits (bundled), mnist, emnist, cifar10, cinic10, or pkg.module:loader
    root: str = "data"  # where on-disk datasets live
    download: bool = False  # fetch missing datasets (needs internet)
    partition: str = "dirichlet"  # dirichlet, iid, or pkg.module:split
    shards_overlap: bool = False  # a custom partition may give devices shared samples
    concentration: float = 0.3  # Dirichlet concentration over labels
    samples_per_device: Optional[int] = None  # fixed shard size, drawn without replacement
    test_fraction: float = 0.2  # digits only: seeded held-out share
    emnist_split: str = "balanced"
    augment: bool = False  # CIFAR-style random crop + flip at train time
    seed: Optional[int] = None  # seed of the split (partition; digits' hold-out); None = run.seed

    def __post_init__(self) -> None:
        plugins.check("data.name", self.name, ("digits", "mnist", "emnist", "cifar10", "cinic10"))
        plugins.check("data.partition", self.partition, ("dirichlet", "iid"))
        _at_least("data.concentration", self.concentration, 0, strict=True)
        _at_least("data.samples_per_device", self.samples_per_device, 1)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            _fail("data.seed", self.seed, "a non-negative integer, or null for run.seed")
        if not 0 < self.test_fraction < 1:
            _fail("data.test_fraction", self.test_fraction, "a number in (0, 1)")


@dataclass(kw_only=True)
class ModelConfig:
    name: str = "lenet5"  # lenet5, resnet18, vgg16, or pkg.module:builder
    width: float = 1.0  # channel multiplier (tests use small widths)

    def __post_init__(self) -> None:
        plugins.check("model.name", self.name, ("lenet5", "resnet18", "vgg16"))
        _at_least("model.width", self.width, 0, strict=True)


@dataclass(kw_only=True)
class RunConfig:
    seed: int = 0
    max_aggregations: Optional[int] = 200
    max_time: Optional[float] = None  # virtual seconds
    target_accuracy: Optional[float] = None  # stop once test accuracy reaches it
    eval_every: int = 1  # evaluate after every n-th aggregation (and the last)
    targets: list = field(default_factory=lambda: [0.5, 0.7, 0.9])  # reported times-to-accuracy
    # Rank 0 checkpoints after every n-th aggregation and/or once this many real seconds have
    # passed since the last checkpoint (null turns either off; a signal always checkpoints).
    # 100 / 300 s: a ResNet-18 checkpoint holds up to beta + 1 versions of ~45 MB (0.5 GB at
    # beta = 10) and took 4.2 s to write and fsync on a small VM (benchmarks/checkpoint.py), ~1%
    # of five minutes; LeNet-5's take 0.05 s. A signal checkpoints whatever these say.
    checkpoint_every: Optional[int] = 100
    checkpoint_every_s: Optional[float] = 300.0

    def __post_init__(self) -> None:
        _at_least("run.max_aggregations", self.max_aggregations, 1)
        _at_least("run.max_time", self.max_time, 0, strict=True)
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            _fail("run.target_accuracy", self.target_accuracy, "a number in (0, 1] or null")
        _at_least("run.eval_every", self.eval_every, 1)
        _at_least("run.checkpoint_every", self.checkpoint_every, 1)
        _at_least("run.checkpoint_every_s", self.checkpoint_every_s, 0, strict=True)
        for t in self.targets:
            if not isinstance(t, (int, float)) or not 0 < t <= 1:
                _fail("run.targets", self.targets, "a list of accuracies in (0, 1]")
        if self.max_aggregations is None and self.max_time is None and self.target_accuracy is None:
            _fail("run.max_aggregations", None, "a number, unless run.max_time or run.target_accuracy is set")


@dataclass(kw_only=True)
class RuntimeConfig:
    device: str = "auto"  # auto, cpu, cuda
    backend: str = "auto"  # payload transport: auto (= gloo, pinned host buffers), gloo, nccl (opt-in; untested on >= 2 GPUs)
    timeout_s: float = 600.0  # a dead, frozen or stuck (no training progress) worker is named within this
    precision: str = "32"  # 32 or bf16 (autocast on GPU)
    threads: Optional[int] = None  # torch intra-op threads per process (None: torch's default)
    batch_jobs: int = 1  # G: pending jobs a rank trains together (torch.func); 1 = one at a time, today's bits
    placement: str = "balanced"  # which worker trains a job: balanced (least queued work; every worker holds the
    # training set) or device (device k on worker 1 + k mod (W-1); a worker holds only its devices' rows)

    def __post_init__(self) -> None:
        _choice("runtime.device", self.device, ("auto", "cpu", "cuda"))
        _choice("runtime.backend", self.backend, ("auto", "gloo", "nccl"))
        _choice("runtime.placement", self.placement, ("balanced", "device"))
        _at_least("runtime.timeout_s", self.timeout_s, 0, strict=True)
        _choice("runtime.precision", self.precision, ("32", "bf16"))
        _at_least("runtime.threads", self.threads, 1)
        if isinstance(self.batch_jobs, bool) or not isinstance(self.batch_jobs, int) or self.batch_jobs < 1:
            _fail("runtime.batch_jobs", self.batch_jobs, "an integer >= 1 (jobs a rank trains together; 1 = one at a time)")


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
