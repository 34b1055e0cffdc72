"""The sections of a run configuration: one kw-only dataclass each, checked in ``__post_init__``.

Every key is declared with its default, its help and its domain (``key(default, "help", "(0, 1]")``,
:mod:`.keys`, :mod:`.domains`); ``__post_init__`` checks every key against its domain
(:func:`~.domains.check_fields`), then what relates keys to each other. docs/configuration.md is
generated from the same declarations (``python -m seafl_dist.settings.reference``). Defaults follow
the paper's setup; every check names the key, the value and what is allowed (:class:`ConfigError`).
:mod:`seafl_dist.settings.core` assembles them and loads YAML.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.data import (  # noqa: F401  (re-exported: the section and the names it knows)
    EMNIST_SPLITS, TOKEN_DATASETS, WITH_WRITERS, WITHOUT_WRITERS, DataConfig,
)
from seafl_dist.settings.domains import SEEDS, Text, check_fields, list_of, plugin_or
from seafl_dist.settings.errors import ConfigError, _fail  # noqa: F401  (ConfigError re-exported)
from seafl_dist.settings.keys import key, section
from seafl_dist.settings.plugins import own_params
from seafl_dist.settings.dp_sgd import DPSGDConfig, check_dp_sgd  # noqa: F401  (check_dp_sgd re-exported)
from seafl_dist.settings.algorithm import (  # noqa: F401  (re-exported: the section and the names it knows)
    ALGORITHMS, SIMILARITY_MODES, SIMILARITY_OVER, UNSET, AlgorithmConfig,
)

TRAIN_LOOPS = ("plain", "lightning")
METRIC_BOUNDS = {"accuracy": (0.0, 1.0), "loss": (0.0, float("inf"))}  # (low, high]: targets must lie inside
TOKEN_MODELS = ("lstm",)  # built-in models that take token ids; every other built-in one takes images
MODEL_NAMES = ("lenet5", "resnet18", "vgg16") + TOKEN_MODELS


@dataclass(kw_only=True)
class DevicesConfig:
    num: Optional[int] = key(100, "N: simulated devices; `null` (with `data.partition: natural` only): one per writer "
                             "or group",
                             "[1, inf)")
    concurrency: int = key(20, "M: devices training at once, at most `devices.num`", "[1, inf)")
    profile: Optional[str] = key(None, "a device profile CSV (speed, bandwidth, availability windows; "
                                 "docs/devices.md); `null`: every device always online at the clock's constants",
                                 note="With a profile, `clock.idle` is `none` unless the config sets a `clock.idle` "
                                      "key (then its idle times are added). A resumed run compares the file's content "
                                      "(sha256), not its path.")
    dropout: Optional[float] = key(None, "p: each job drops with probability p at a uniform point of its "
                                   "span; `null`: no random drops", "[0, 1)")
    availability_scale: float = key(1.0, "multiplies the profile's window times and periods (0.001 maps a week "
                                    "onto about 10 minutes)", "(0, inf)")

    def __post_init__(self) -> None:
        check_fields(self, "devices")
        if self.num is not None and self.concurrency > self.num:  # null: checked against the writers at load
            _fail("devices.concurrency", self.concurrency, f"at most devices.num ({self.num})")


@dataclass(kw_only=True)
class TrainConfig:
    epochs: int = key(5, "E: local epochs per job", "[1, inf)")
    batch_size: int = key(32, "local SGD batch size (at least 2 for `resnet18` and `vgg16`: batch norm)", "[1, inf)")
    lr: float = key(0.01, "local SGD learning rate", "(0, inf)")
    momentum: float = key(0.0, "local SGD momentum", "[0, inf)")
    weight_decay: float = key(0.0, "local SGD weight decay", "[0, inf)")
    loop: str = key("plain", "how a job trains: `plain` (seafl's loop with Lightning's semantics) or `lightning` "
                    "(one `lightning.Trainer.fit` per job)", TRAIN_LOOPS,
                    note="Both run a LightningModule as Lightning's automatic optimization does: its "
                         "`configure_optimizers` forms, schedulers, hooks and `self.log`, to the same bits on a CPU "
                         "(docs/extending.md has the hook table). `plain` gives the module a stand-in Trainer and "
                         "costs what a bare loop costs; `lightning` costs a Trainer per job and takes what the plain "
                         "loop refuses: manual optimization, `configure_callbacks`, the batch-transfer hooks.")
    grad_clip_val: Optional[float] = key(None, "clip gradients at this value before each optimiser step, as "
                                         "Trainer's `gradient_clip_val`; `null`: no clipping", "(0, inf)")
    grad_clip_algorithm: Optional[str] = key(None, "`norm` or `value`, as Trainer's `gradient_clip_algorithm`; "
                                             "`null`: by norm", ("norm", "value"))
    prox_mu: float = key(0.0, "FedProx's proximal term μ: every local step adds μ(w − w_base) to the gradients "
                         "(w_base: the model the job started from), before clipping; 0: off", "[0, inf)",
                         note="On every training path (the plain loop, `train.loop: lightning`, `runtime.batch_jobs`'s "
                              "fused step, CUDA-graph slots). A LightningModule of manual optimization is refused "
                              "with μ > 0. `algorithm.name=fedbuff train.prox_mu=0.01` is FedProx on FedBuff's "
                              "buffer (docs/algorithms.md, \"FedProx\").")
    dp_sgd: DPSGDConfig = section(DPSGDConfig, "record-level DP-SGD on the devices, with Opacus (docs/privacy.md)")

    def __post_init__(self) -> None:
        check_fields(self, "train")


@dataclass(kw_only=True)
class IdleConfig:
    distribution: str = key("zipf", "a device's idle time per epoch: `zipf`, `pareto` or `none`",
                            ("zipf", "pareto", "none"),
                            note="Zipf(`clock.idle.s`) draws integers ≥ 1, Pareto(`clock.idle.a`) numpy's Lomax "
                                 "form (≥ 0); either is capped at `clock.idle.max`. Every draw comes from a stream "
                                 "named by (seed, purpose, device, job), so adding a device or a rank never shifts "
                                 "anyone else's draws.")
    s: float = key(1.7, "Zipf exponent", "(1, inf)")
    a: float = key(1.0, "Pareto (Lomax) shape", "(0, inf)")
    max: float = key(60.0, "cap on one idle time, virtual seconds", "[0, inf)")
    resample: str = key("per_device", "`per_device` (drawn once per device) or `per_epoch` (drawn for every epoch)",
                        ("per_device", "per_epoch"))

    def __post_init__(self) -> None:
        check_fields(self, "clock.idle")


@dataclass(kw_only=True)
class ClockConfig:
    sec_per_sample: float = key(
        0.001, "compute time per sample per epoch, virtual seconds: c_k = n_k × this", "[0, inf)",
        note="A job of device k starting at time s has epoch ends b_e = s + `clock.download_s` + e·(c_k + z_k), "
             "with c_k = n_k × `clock.sec_per_sample` for a shard of n_k samples and z_k the device's idle time "
             "(`clock.idle.distribution`); its update reaches the server at b_E + `clock.upload_s`.")
    download_s: float = key(0.0, "time to receive the global model, before epoch 1, virtual seconds", "[0, inf)")
    upload_s: float = key(0.0, "time to send the update, after the last epoch, virtual seconds", "[0, inf)")
    compute_scale: float = key(1.0, "multiplies a device profile's `sec_per_sample` (`devices.profile` only)",
                               "[0, inf)")
    idle: IdleConfig = section(IdleConfig, "each device's idle time between epochs")

    def __post_init__(self) -> None:
        check_fields(self, "clock")


@dataclass(kw_only=True)
class ModelConfig:
    name: str = key("lenet5", "the model: `lenet5`, `resnet18`, `vgg16` (images), `lstm` (LEAF's character LSTM, "
                    "for shakespeare), or `pkg.module:builder`", plugin_or(MODEL_NAMES))
    width: float = key(1.0, "channel multiplier (small widths make small test models)", "(0, inf)")
    params: Optional[dict] = key(
        None, "a model builder of your own only: its own keyword arguments (`{depth: 3}`), passed as "
              "`builder(num_classes, in_channels, image_size, width, depth=3)`; `null`: none",
        note="Checked against the builder's signature when the config loads, as `algorithm.params` is against a "
             "rule's. Left out of config.yaml when null.")

    def __post_init__(self) -> None:
        check_fields(self, "model")
        self.params = own_params("model.name", self.name, self.params)


@dataclass(kw_only=True)
class RunConfig:
    seed: int = key(0, "seed of every random stream of the run (and of the data split unless `data.seed`)", SEEDS,
                    note="Seeds run from 0 to 2³² − 1 (`data.seed` too): the digits' split and numpy's legacy "
                         "seeding (RandomState) take no others, so a larger or negative seed is refused when the "
                         "config loads.")
    max_aggregations: Optional[int] = key(200, "stop after this many aggregations; `null`: no limit (then "
                                          "`run.max_time` or `run.target_accuracy` must be set)", "[1, inf]")
    max_time: Optional[float] = key(None, "stop at this virtual time, seconds; `null`: no limit", "(0, inf]")
    target_accuracy: Optional[float] = key(None, "stop once `run.target_metric` reaches this (test accuracy by "
                                           "default; in (0, 1] for accuracy); `null`: never", "(-inf, inf)")
    eval_every: int = key(1, "evaluate after every n-th aggregation (and after the last)", "[1, inf)")
    targets: list = key([0.5, 0.7, 0.9], "values of `run.target_metric` whose time to target the summary and reports "
                        "give (accuracies in (0, 1] by default)", list_of("(-inf, inf)"))
    target_metric: str = key("accuracy", "the evaluation's metric that targets, stopping, best and final follow: "
                             "`accuracy` or `loss` (the built-in evaluation), or a name a module's own "
                             "`test_step` logs", Text(),
                             note="A module with a `test_step` (or else a `validation_step`) is evaluated by it, and "
                                  "what it logs there becomes the evaluation's metrics (docs/extending.md, "
                                  "\"Evaluation by the module's own step\"). `run.target_accuracy` and `run.targets` "
                                  "are values of this metric; `run.target_mode` says whether it should rise or fall. "
                                  "Left out of config.yaml at its default.")
    target_mode: str = key("max", "`max` (a target is reached at or above it) or `min` (at or below: a loss)",
                           ("max", "min"))
    device_eval_every: Optional[int] = key(
        None, "evaluate the global model on each device's held-out data after every n-th aggregation (a multiple "
              "of `run.eval_every`) and at the run's last evaluation; `null`: off", "[1, inf)",
        note="On rank 0, without moving the virtual clock: device_metrics.csv (a row per version and device), "
             "device_summary.csv (per evaluation: weighted and plain mean, std, p10/p50/p90, the worst 10%'s mean), "
             "summary.json's `device_eval` (docs/device_eval.md). Left out of config.yaml when null.")
    device_eval_sample: Optional[int] = key(None, "the devices device evaluation covers: this many, drawn once "
                                            "from `data.seed` and kept for the whole run; `null`: every device",
                                            "[1, inf)")
    checkpoint_every: Optional[int] = key(
        100, "rank 0 checkpoints after every n-th aggregation; `null`: off", "[1, inf)",
        note="Either of `run.checkpoint_every` and `run.checkpoint_every_s` triggers a checkpoint, and a "
             "signal checkpoints whatever they say. 100 aggregations and 300 s: a ResNet-18 checkpoint holds up to "
             "β + 1 versions of ~45 MB (0.5 GB at β = 10) and took 4.2 s to write and fsync on a small VM "
             "(`benchmarks/checkpoint.py`), ~1% of five minutes; LeNet-5's take 0.05 s. Both may change "
             "when a run resumes.")
    checkpoint_every_s: Optional[float] = key(300.0, "rank 0 checkpoints once this many real seconds passed since "
                                              "the last checkpoint; `null`: off", "(0, inf)")
    stop_on_divergence: bool = key(
        False, "stop a run that diverges (status `diverged`); `false`: say so once and go on",
        note="A run diverges at the first evaluation whose loss is non-finite or above 10 × the version-0 loss, or "
             "whose accuracy fell back to within 10% of chance (the largest class's share c of the test set) "
             "of the best so far above it, once the best reached half way from c to 1 (docs/running.md, "
             "\"Divergence\"). Either way one line says so and summary.json records `diverged_at`. Left out of "
             "config.yaml when false.")

    def __post_init__(self) -> None:
        check_fields(self, "run")
        bounds = METRIC_BOUNDS.get(self.target_metric)
        if bounds is not None:  # a metric with a known range: a target outside it is never reached
            for name, values in (("run.target_accuracy", [self.target_accuracy]), ("run.targets", self.targets)):
                if any(v is not None and not bounds[0] < v <= bounds[1] for v in values):
                    _fail(name, values[0] if name == "run.target_accuracy" else values,
                          f"values of run.target_metric={self.target_metric} in ({bounds[0]:g}, {bounds[1]:g}]")
        if self.device_eval_every is not None and self.device_eval_every % self.eval_every:
            _fail("run.device_eval_every", self.device_eval_every, f"a multiple of run.eval_every ({self.eval_every})")
        if self.max_aggregations is None and self.max_time is None and self.target_accuracy is None:
            _fail("run.max_aggregations", None, "a number, unless run.max_time or run.target_accuracy is set")
