"""The sections of a run configuration: one kw-only dataclass each, checked in ``__post_init__``.

Every key is declared with its default and its help (``key(default, "help")``, :mod:`.keys`);
docs/configuration.md is generated from them (``python -m seafl_dist.settings.reference``).
Defaults follow the paper's setup; every check names the key, the value and what is allowed
(:class:`ConfigError`). :mod:`seafl_dist.settings.core` assembles them and loads YAML.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from seafl_dist.settings import plugins
from seafl_dist.settings.errors import ConfigError, _at_least, _choice, _fail  # noqa: F401  (ConfigError re-exported)
from seafl_dist.settings.keys import key, section

ALGORITHMS = ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg")
SIMILARITY_MODES = ("delta_vs_global", "model_vs_global", "delta_vs_movement")
SIMILARITY_OVER = ("parameters", "parameters_and_stats")
TRAIN_LOOPS = ("plain", "lightning")
WITHOUT_WRITERS = ("digits", "mnist", "emnist", "cifar10", "cinic10")  # built-in datasets natural cannot split


class _Unset:
    """The default of a key whose value depends on another key (``algorithm.staleness_limit`` on the name)."""

    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()


@dataclass(kw_only=True)
class AlgorithmConfig:
    """Which rule aggregates the buffer and when (SPEC "The server loop", "Aggregation rules")."""

    name: str = key("seafl", "the algorithm: `seafl`, `seafl2`, `fedbuff`, `fedasync`, `fedavg`, or `pkg.module:rule` "
                    "(a rule of your own)")
    buffer_size: int = key(10, "K: the server aggregates once the buffer holds this many updates; fedavg forces "
                           "`devices.concurrency`, fedasync 1")
    staleness_limit: Optional[int] = key(
        UNSET, "β: the server waits rather than let an in-flight update grow staler than this; `null` = ∞",
        shown="`10`; fedbuff, fedasync: `null`; fedavg: `0`",
        note="Not given, it is 10 for seafl and seafl2 and ∞ for fedbuff and fedasync; a value given (in the file "
             "or an override) is kept for fedbuff and fedasync too, which then wait for stragglers as SEAFL does, "
             "as PLATO's `staleness_bound` made the paper's baselines do. fedavg forces 0 (synchronous rounds).")
    alpha: float = key(3.0, "SEAFL α: staleness weight γ = αβ/(S+β) (Eq. 4)")
    mu: float = key(1.0, "SEAFL μ: importance weight s = μ(cos+1)/2 (Eq. 5); 0 turns importance weighting off")
    theta: float = key(0.8, "SEAFL ϑ: server mixing w ← (1−ϑ)w + ϑ·Σ p_k w_k (Eq. 8), in (0, 1]")
    similarity: str = key("delta_vs_global", "the vectors Eq. 5's cosine compares: `delta_vs_global`, "
                          "`model_vs_global` or `delta_vs_movement`",
                          note="With Δ_k = w_k − w_{t_k} the update of a job that started from version t_k and w_t "
                               "the current global model: `delta_vs_global` compares Δ_k with w_t (Eq. 5 as written), "
                               "`model_vs_global` w_k with w_t, `delta_vs_movement` Δ_k with w_t − w_{t_k}.")
    similarity_over: str = key("parameters", "the entries Eq. 5's cosine runs over: `parameters` (trainable) or "
                               "`parameters_and_stats` (plus batch norm's running mean and variance)",
                               note="Never over integer counters such as batch norm's `num_batches_tracked`: with "
                                    "them in, ResNet-18's 20 counters outweighed 11 M weights and every update "
                                    "scored cos ≈ 0.96–0.9999, so importance weighting did nothing.")
    server_lr: float = key(1.0, "FedBuff η_g: server learning rate, w ← w + η_g · mean Δ_k")
    staleness_scaling: str = key("none", "FedBuff: `none`, or `sqrt` to scale each update by 1/√(1+S)")
    mixing: float = key(0.6, "FedAsync α_mix: w ← (1−a)w + a·w_k with a = α_mix·f(S), in (0, 1]")
    staleness_fn: str = key("polynomial", "FedAsync f(S): `constant` (1), `polynomial` ((1+S)^−a) or `hinge`")
    poly_a: float = key(0.5, "FedAsync: exponent a of the `polynomial` staleness function")
    hinge_a: float = key(10.0, "FedAsync: slope a of the `hinge` staleness function, f(S) = 1/(a(S−b)+1) for S > b")
    hinge_b: float = key(4.0, "FedAsync: threshold b of the `hinge` staleness function (f = 1 up to S = b)")
    partial: Optional[bool] = key(None, "SEAFL²'s partial training (notify blocking devices to upload early) for "
                                  "another rule; `null`: for seafl2 only")

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
    num: Optional[int] = key(100, "N: simulated devices; `null` (with `data.partition: natural` only): one per writer")
    concurrency: int = key(20, "M: devices training at once, at most `devices.num`")
    profile: Optional[str] = key(None, "a device profile CSV (speed, bandwidth, availability windows; "
                                 "docs/devices.md); `null`: every device always online at the clock's constants",
                                 note="With a profile, `clock.idle` is `none` unless the config sets a `clock.idle` "
                                      "key (then its idle times are added). A resumed run compares the file's content "
                                      "(sha256), not its path.")
    dropout: Optional[float] = key(None, "p in [0, 1): each job drops with probability p at a uniform point of its "
                                   "span; `null`: no random drops")
    availability_scale: float = key(1.0, "multiplies the profile's window times and periods (0.001 maps a week "
                                    "onto about 10 minutes)")

    def __post_init__(self) -> None:
        _at_least("devices.num", self.num, 1)
        _at_least("devices.concurrency", self.concurrency, 1)
        if self.dropout is not None and not 0 <= self.dropout < 1:
            _fail("devices.dropout", self.dropout, "null or a number in [0, 1)")
        _at_least("devices.availability_scale", self.availability_scale, 0, strict=True)
        if self.num is not None and self.concurrency > self.num:  # null: checked against the writers at load
            _fail("devices.concurrency", self.concurrency, f"at most devices.num ({self.num})")


@dataclass(kw_only=True)
class TrainConfig:
    epochs: int = key(5, "E: local epochs per job")
    batch_size: int = key(32, "local SGD batch size (at least 2 for `resnet18` and `vgg16`: batch norm)")
    lr: float = key(0.01, "local SGD learning rate")
    momentum: float = key(0.0, "local SGD momentum")
    weight_decay: float = key(0.0, "local SGD weight decay")
    loop: str = key("plain", "how a job trains: `plain` (seafl's loop with Lightning's semantics) or `lightning` "
                    "(one `lightning.Trainer.fit` per job)",
                    note="Both run a LightningModule as Lightning's automatic optimization does: its "
                         "`configure_optimizers` forms, schedulers, hooks and `self.log`, to the same bits on a CPU "
                         "(docs/extending.md has the hook table). `plain` gives the module a stand-in Trainer and "
                         "costs what a bare loop costs; `lightning` costs a Trainer per job and takes what the plain "
                         "loop refuses: manual optimization, `configure_callbacks`, the batch-transfer hooks.")
    grad_clip_val: Optional[float] = key(None, "clip gradients at this value before each optimiser step, as "
                                         "Trainer's `gradient_clip_val`; `null`: no clipping")
    grad_clip_algorithm: Optional[str] = key(None, "`norm` or `value`, as Trainer's `gradient_clip_algorithm`; "
                                             "`null`: by norm")

    def __post_init__(self) -> None:
        _at_least("train.epochs", self.epochs, 1)
        _at_least("train.batch_size", self.batch_size, 1)
        _at_least("train.lr", self.lr, 0, strict=True)
        _at_least("train.momentum", self.momentum, 0)
        _at_least("train.weight_decay", self.weight_decay, 0)
        _choice("train.loop", self.loop, TRAIN_LOOPS)
        _at_least("train.grad_clip_val", self.grad_clip_val, 0, strict=True)
        if self.grad_clip_algorithm is not None:
            _choice("train.grad_clip_algorithm", self.grad_clip_algorithm, ("norm", "value"))


@dataclass(kw_only=True)
class IdleConfig:
    distribution: str = key("zipf", "a device's idle time per epoch: `zipf`, `pareto` or `none`",
                            note="Zipf(`clock.idle.s`) draws integers ≥ 1, Pareto(`clock.idle.a`) numpy's Lomax "
                                 "form (≥ 0); either is capped at `clock.idle.max`. Every draw comes from a stream "
                                 "named by (seed, purpose, device, job), so adding a device or a rank never shifts "
                                 "anyone else's draws.")
    s: float = key(1.7, "Zipf exponent (> 1)")
    a: float = key(1.0, "Pareto (Lomax) shape (> 0)")
    max: float = key(60.0, "cap on one idle time, virtual seconds")
    resample: str = key("per_device", "`per_device` (drawn once per device) or `per_epoch` (drawn for every epoch)")

    def __post_init__(self) -> None:
        _choice("clock.idle.distribution", self.distribution, ("zipf", "pareto", "none"))
        if self.distribution == "zipf":
            _at_least("clock.idle.s", self.s, 1, strict=True)
        _at_least("clock.idle.a", self.a, 0, strict=True)
        _at_least("clock.idle.max", self.max, 0)
        _choice("clock.idle.resample", self.resample, ("per_device", "per_epoch"))


@dataclass(kw_only=True)
class ClockConfig:
    sec_per_sample: float = key(
        0.001, "compute time per sample per epoch, virtual seconds: c_k = n_k × this",
        note="A job of device k starting at time s has epoch ends b_e = s + `clock.download_s` + e·(c_k + z_k), "
             "with c_k = n_k × `clock.sec_per_sample` for a shard of n_k samples and z_k the device's idle time "
             "(`clock.idle.distribution`); its update reaches the server at b_E + `clock.upload_s`.")
    download_s: float = key(0.0, "time to receive the global model, before epoch 1, virtual seconds")
    upload_s: float = key(0.0, "time to send the update, after the last epoch, virtual seconds")
    compute_scale: float = key(1.0, "multiplies a device profile's `sec_per_sample` (`devices.profile` only)")
    idle: IdleConfig = section(IdleConfig, "each device's idle time between epochs")

    def __post_init__(self) -> None:
        _at_least("clock.sec_per_sample", self.sec_per_sample, 0)
        _at_least("clock.download_s", self.download_s, 0)
        _at_least("clock.upload_s", self.upload_s, 0)
        _at_least("clock.compute_scale", self.compute_scale, 0)


@dataclass(kw_only=True)
class DataConfig:
    name: str = key("digits", "the dataset: `digits` (bundled), `mnist`, `emnist`, `cifar10`, `cinic10`, `femnist` "
                    "(LEAF's JSON files, by writer), or `pkg.module:loader`")
    root: str = key("data", "directory the on-disk datasets live in")
    download: bool = key(False, "fetch a missing MNIST, EMNIST or CIFAR-10 through torchvision (needs internet)")
    partition: str = key("dirichlet", "how samples are split into shards: `dirichlet` (label skew), `iid`, "
                         "`natural` (one device per writer: femnist), or `pkg.module:split`",
                         note="`natural`: device k is the k-th writer of an order seeded by `data.seed`, with all "
                              "of that writer's training samples; `devices.num: null` takes every writer, N the "
                              "first N (docs/femnist.md).")
    shards_overlap: bool = key(False, "a custom `data.partition` may give devices shared samples")
    concentration: float = key(0.3, "Dirichlet concentration over labels (smaller: more skew)")
    samples_per_device: Optional[int] = key(None, "fixed shard size, drawn without replacement; `null`: the "
                                            "whole training set is shared out")
    test_fraction: float = key(0.2, "`digits` only: the seeded, stratified held-out share, in (0, 1)")
    emnist_split: str = key("balanced", "`emnist` only: the split (`balanced`: 47 classes)")
    augment: bool = key(False, "random crop and horizontal flip of training batches (CIFAR style)")
    seed: Optional[int] = key(None, "seed of the data split (shards; digits' hold-out); `null`: `run.seed`",
                              note="Fix `data.seed` to vary `run.seed` over one split: runs of different "
                                   "`run.seed` then train on the same shards.")

    def __post_init__(self) -> None:
        plugins.check("data.name", self.name, WITHOUT_WRITERS + ("femnist",))
        plugins.check("data.partition", self.partition, ("dirichlet", "iid", "natural"))
        if self.partition == "natural" and self.name in WITHOUT_WRITERS:
            _fail("data.partition", self.partition, f"dirichlet, iid or an import path for data.name={self.name}: "
                  f"natural makes each writer a device and {self.name} has no writers (femnist has)")
        if self.partition == "natural" and self.samples_per_device is not None:
            _fail("data.samples_per_device", self.samples_per_device, "null with data.partition=natural (a "
                  "writer's shard is all of its samples)")
        _at_least("data.concentration", self.concentration, 0, strict=True)
        _at_least("data.samples_per_device", self.samples_per_device, 1)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            _fail("data.seed", self.seed, "a non-negative integer, or null for run.seed")
        if not 0 < self.test_fraction < 1:
            _fail("data.test_fraction", self.test_fraction, "a number in (0, 1)")


@dataclass(kw_only=True)
class ModelConfig:
    name: str = key("lenet5", "the model: `lenet5`, `resnet18`, `vgg16`, or `pkg.module:builder`")
    width: float = key(1.0, "channel multiplier (small widths make small test models)")

    def __post_init__(self) -> None:
        plugins.check("model.name", self.name, ("lenet5", "resnet18", "vgg16"))
        _at_least("model.width", self.width, 0, strict=True)


@dataclass(kw_only=True)
class RunConfig:
    seed: int = key(0, "seed of every random stream of the run (and of the data split unless `data.seed`)")
    max_aggregations: Optional[int] = key(200, "stop after this many aggregations; `null`: no limit (then "
                                          "`run.max_time` or `run.target_accuracy` must be set)")
    max_time: Optional[float] = key(None, "stop at this virtual time, seconds; `null`: no limit")
    target_accuracy: Optional[float] = key(None, "stop once test accuracy reaches this, in (0, 1]; `null`: never")
    eval_every: int = key(1, "evaluate after every n-th aggregation (and after the last)")
    targets: list = key([0.5, 0.7, 0.9], "accuracies whose time-to-accuracy the summary and reports give")
    checkpoint_every: Optional[int] = key(
        100, "rank 0 checkpoints after every n-th aggregation; `null`: off",
        note="Either of `run.checkpoint_every` and `run.checkpoint_every_s` triggers a checkpoint, and a "
             "signal checkpoints whatever they say. 100 aggregations and 300 s: a ResNet-18 checkpoint holds up to "
             "β + 1 versions of ~45 MB (0.5 GB at β = 10) and took 4.2 s to write and fsync on a small VM "
             "(`benchmarks/checkpoint.py`), ~1% of five minutes; LeNet-5's take 0.05 s. Both may change "
             "when a run resumes.")
    checkpoint_every_s: Optional[float] = key(300.0, "rank 0 checkpoints once this many real seconds passed since "
                                              "the last checkpoint; `null`: off")

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
