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
from typing import Any, Optional

from seafl_dist.settings.data import (  # noqa: F401  (re-exported: the section and the names it knows)
    EMNIST_SPLITS, TOKEN_DATASETS, WITH_WRITERS, WITHOUT_WRITERS, DataConfig,
)
from seafl_dist.settings import plugins
from seafl_dist.settings.domains import SEEDS, Text, check_fields, list_of, plugin_or
from seafl_dist.settings.errors import ConfigError, _fail  # noqa: F401  (ConfigError re-exported)
from seafl_dist.settings.keys import key, section
from seafl_dist.settings.plugins import check_params, is_import_path, refuse_params_of_built_in
from seafl_dist.settings.asyncsgd import AsyncSGDConfig
from seafl_dist.settings.ca2fl import Ca2flConfig
from seafl_dist.settings.defense import DefenseConfig
from seafl_dist.settings.dp_sgd import DPSGDConfig, check_dp_sgd  # noqa: F401  (check_dp_sgd re-exported)
from seafl_dist.settings.fedcompass import FedCompassConfig
from seafl_dist.settings.fedstaleweight import FedStaleWeightConfig
from seafl_dist.settings.port import PortConfig
from seafl_dist.settings.server_opt import ServerOptConfig

ALGORITHMS = ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg", "ca2fl", "fadas", "asyncsgd", "port",
              "fedstaleweight", "fedcompass", "scaffold")
SIMILARITY_MODES = ("delta_vs_global", "model_vs_global", "delta_vs_movement")
SIMILARITY_OVER = ("parameters", "parameters_and_stats")
TRAIN_LOOPS = ("plain", "lightning")
METRIC_BOUNDS = {"accuracy": (0.0, 1.0), "loss": (0.0, float("inf"))}  # (low, high]: targets must lie inside
TOKEN_MODELS = ("lstm",)  # built-in models that take token ids; every other built-in one takes images
MODEL_NAMES = ("lenet5", "resnet18", "vgg16") + TOKEN_MODELS


class _Unset:
    """The default of a key whose value depends on another key (``algorithm.staleness_limit`` on the name)."""

    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()


@dataclass(kw_only=True)
class AlgorithmConfig:
    """Which rule aggregates the buffer and when (SPEC "The server loop", "Aggregation rules")."""

    name: str = key("seafl", "the algorithm: `seafl`, `seafl2`, `fedbuff`, `fedasync`, `fedavg`, `ca2fl`, `fadas` "
                    "(FedBuff with `amsgrad` and the delay-adaptive η), `asyncsgd` (delay-adaptive asynchronous SGD), "
                    "`port`, `fedstaleweight`, `fedcompass` (local steps assigned per device from the clock), `scaffold` "
                    "(FedBuff with SCAFFOLD's control variates), or `pkg.module:rule` "
                    "(a rule of your own)", plugin_or(ALGORITHMS))
    params: Optional[dict] = key(
        None, "a rule of your own only: its own keyword arguments (`{beta: 2}`), passed as `rule(cfg, version, "
              "global_flat, updates, base_model, beta=2)`; `null`: none",
        note="Checked against the rule's signature when the config loads (an unknown name is refused naming its "
             "parameters); a sweep varies one entry as `algorithm.params.beta`, an override sets it as "
             "`algorithm.params.beta=2`. Left out of config.yaml when null (docs/extending.md).")
    buffer_size: int = key(10, "K: the server aggregates once the buffer holds this many updates; fedavg forces "
                           "`devices.concurrency`, fedasync and asyncsgd 1", "[1, inf)")
    staleness_limit: Optional[int] = key(
        UNSET, "β: the server waits rather than let an in-flight update grow staler than this; `null` = ∞",
        "[0, inf]",
        shown="`10`; fedbuff, fedasync, ca2fl, fadas, asyncsgd, fedstaleweight: `null`; fedavg: `0`",
        note="Not given, it is 10 for seafl and seafl2 and ∞ for fedbuff, fedasync, ca2fl, fadas, asyncsgd, "
             "fedstaleweight and scaffold; a value "
             "given (in the file or an override) is kept for those too, which then wait for stragglers as SEAFL does, "
             "as PLATO's `staleness_bound` made the paper's baselines do. fedavg forces 0 (synchronous rounds). "
             "A rule of your own gets SEAFL's 10, and a run or sweep says so in one line at the start "
             "(docs/extending.md).")
    alpha: float = key(3.0, "SEAFL α: staleness weight γ = αβ/(S+β) (Eq. 4)", "[0, inf)")
    mu: float = key(1.0, "SEAFL μ: importance weight s = μ(cos+1)/2 (Eq. 5); 0 turns importance weighting off",
                    "[0, inf)")
    theta: float = key(0.8, "SEAFL ϑ: server mixing w ← (1−ϑ)w + ϑ·Σ p_k w_k (Eq. 8)", "(0, 1]")
    similarity: str = key("delta_vs_global", "the vectors Eq. 5's cosine compares: `delta_vs_global`, "
                          "`model_vs_global` or `delta_vs_movement`", SIMILARITY_MODES,
                          note="With Δ_k = w_k − w_{t_k} the update of a job that started from version t_k and w_t "
                               "the current global model: `delta_vs_global` compares Δ_k with w_t (Eq. 5 as written), "
                               "`model_vs_global` w_k with w_t, `delta_vs_movement` Δ_k with w_t − w_{t_k}.")
    similarity_over: str = key("parameters", "the entries Eq. 5's cosine runs over: `parameters` (trainable) or "
                               "`parameters_and_stats` (plus batch norm's running mean and variance)", SIMILARITY_OVER,
                               note="Never over integer counters such as batch norm's `num_batches_tracked`: with "
                                    "them in, ResNet-18's 20 counters outweighed 11 M weights and every update "
                                    "scored cos ≈ 0.96–0.9999, so importance weighting did nothing.")
    server_lr: float = key(1.0, "FedBuff and CA²FL η_g: server learning rate, w ← w + η_g · mean Δ_k (CA²FL: "
                           "calibrated)", "(0, inf)")
    staleness_scaling: str = key("none", "FedBuff: `none`, or `sqrt` to scale each update by 1/√(1+S)",
                                 ("none", "sqrt"))
    mixing: float = key(0.6, "FedAsync α_mix: w ← (1−a)w + a·w_k with a = α_mix·f(S)", "(0, 1]")
    staleness_fn: str = key("polynomial", "FedAsync f(S): `constant` (1), `polynomial` ((1+S)^−a) or `hinge`",
                            ("constant", "polynomial", "hinge"))
    poly_a: float = key(0.5, "FedAsync: exponent a of the `polynomial` staleness function", "[0, inf)")
    hinge_a: float = key(10.0, "FedAsync: slope a of the `hinge` staleness function, f(S) = 1/(a(S−b)+1) for S > b",
                         "[0, inf)")
    hinge_b: float = key(4.0, "FedAsync: threshold b of the `hinge` staleness function (f = 1 up to S = b)", "[0, inf)")
    partial: Optional[bool] = key(None, "SEAFL²'s partial training (notify blocking devices to upload early) for "
                                  "another rule; `null`: for seafl2 only")
    update_norm_factor: Optional[float] = key(
        None, "the update guard: reject an update whose norm ‖w_k − w_{t_k}‖ exceeds this many times its peers' "
              "median; `null`: off", "(1, inf]",
        note="The norm runs over the trainable parameters, in float64. The peers are the buffer's updates that pass "
             "the value check (finite, the right size), or, when fewer than 3 do (FedAsync), the last 20 accepted "
             "norms; with fewer than 3 of those too, nothing is rejected. A rejected update is reported in the "
             "aggregate event as a non-finite one is (weight 0, its reason), before any rule runs, a rule of your "
             "own included. Left out of config.yaml when null.")
    server_opt: ServerOptConfig = section(ServerOptConfig, "the server optimizer: what the server does with the "
                                          "rule's result w′ (stage 6 of an aggregation)")
    ca2fl: Ca2flConfig = section(Ca2flConfig, "CA²FL's own keys: the limit on its cache of each device's latest "
                                 "update")
    asyncsgd: AsyncSGDConfig = section(AsyncSGDConfig, "asyncsgd's step η and its delay adaptation (τ_C, c)")
    port: PortConfig = section(PortConfig, "Port's own keys (`algorithm.name: port`)")
    fedstaleweight: FedStaleWeightConfig = section(FedStaleWeightConfig, "FedStaleWeight's own key "
                                                   "(`algorithm.name: fedstaleweight`)")
    fedcompass: FedCompassConfig = section(FedCompassConfig, "FedCompass's own keys (`algorithm.name: fedcompass`)")
    defense: DefenseConfig = section(DefenseConfig, "a robust-aggregation defense between Screen and Clip: a filter "
                                     "(Krum, Multi-Krum) or an estimator (median, trimmed mean, Bulyan, centered "
                                     "clipping); docs/robustness.md")

    def __post_init__(self) -> None:
        self.limit_given = self.staleness_limit is not UNSET  # not a key: whether the config chose β (limit_line)
        self.num_devices: Optional[int] = None  # not a key: N, resolved (CA²FL's mean over every device, algo/ca2fl.py)
        if self.staleness_limit is UNSET:
            self.staleness_limit = None if self.name in ("fedbuff", "fedasync", "ca2fl", "fadas", "asyncsgd",
                                                         "fedstaleweight", "fedcompass", "scaffold") else 10
        check_fields(self, "algorithm")
        self.params = own_params("algorithm.name", self.name, self.params)
        if self.name == "fadas":
            self.server_opt.as_fadas()
        if self.name == "asyncsgd" and self.server_opt.name != "none":
            _fail("algorithm.server_opt.name", self.server_opt.name, "none with algorithm.name=asyncsgd (its step "
                  "η_t Δ_k is the server's; for an optimizer on one update at a time use algorithm.name=fedbuff with "
                  "algorithm.buffer_size=1 and algorithm.server_opt.delay_adaptive=true)")
        self.server_opt.check_with_rule(self.rule, self.server_lr)
        if self.name == "seafl" and self.alpha == 0 and self.mu == 0:
            _fail("algorithm.alpha", self.alpha, "alpha > 0 or mu > 0 (both 0 gives every update weight 0)")
        if self.name == "fedcompass" and (self.partial or self.staleness_limit is not None):
            key_, val = ("algorithm.partial", self.partial) if self.partial else \
                ("algorithm.staleness_limit", self.staleness_limit)
            _fail(key_, val, f"{'false or null' if self.partial else 'null'} with algorithm.name=fedcompass (its "
                  "groups and their deadlines decide when the server aggregates, not β or SEAFL²'s notifications)")
        if self.name == "seafl2" and self.partial is False:
            _fail("algorithm.partial", self.partial, "true or null for seafl2 (SEAFL² is SEAFL with partial "
                  "training; algorithm.name=seafl has none)")

    def limit_line(self) -> str | None:
        """The start-up line of a rule of your own that runs under SEAFL's β = 10 without the config choosing it,
        printed once on stderr when a run or a sweep starts (docs/extending.md); None when β was given, or for a
        built-in rule (whose default is documented per rule)."""
        if self.limit_given or not plugins.is_import_path(self.name):
            return None
        return (f"seafl: algorithm.name={self.name} runs under β = {self.staleness_limit} (algorithm.staleness_limit "
                f"not given: SEAFL's default; the server waits rather than let an update grow staler than "
                f"{self.staleness_limit}); set algorithm.staleness_limit to choose, null for none (β = ∞, as fedbuff)")

    @property
    def partial_training(self) -> bool:
        """SEAFL² notifies blocking devices to upload early (SPEC server loop step 4); ``partial``
        turns the same on for another rule (a custom one, say)."""
        return self.name == "seafl2" or bool(self.partial)

    @property
    def rule(self) -> str:
        """The aggregation rule; SEAFL² aggregates with SEAFL's rule, FADAS with FedBuff's (its optimizer does the
        rest)."""
        return {"seafl2": "seafl", "fadas": "fedbuff"}.get(self.name, self.name)


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


def own_params(key: str, name: str, params: Optional[dict]) -> Optional[dict]:
    """``<section>.params`` checked against the callable ``name`` names (settings/plugins.py ``check_params``);
    refused when non-empty for a built-in; an empty mapping is null (config.yaml leaves it out)."""
    if is_import_path(name):
        check_params(key, name, params)
    else:
        refuse_params_of_built_in(key, name, params)
    return params or None


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
