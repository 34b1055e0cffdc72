"""The `algorithm` section: which rule aggregates the buffer and when (SPEC "The server loop", "Aggregation rules"),
with the subsections of the rules that have keys of their own (server optimizer, CA²FL, asyncsgd, Port,
FedStaleWeight, FedCompass, the defense stage). Each key is declared with its default, help and domain
(:mod:`.keys`); :mod:`.sections` re-exports it beside the other sections, and settings/across.py checks what it asks
of the other sections.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from seafl_dist.settings import plugins
from seafl_dist.settings.domains import check_fields, plugin_or
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key, section
from seafl_dist.settings.plugins import own_params
from seafl_dist.settings.asyncsgd import AsyncSGDConfig
from seafl_dist.settings.ca2fl import Ca2flConfig
from seafl_dist.settings.defense import DefenseConfig
from seafl_dist.settings.fedcompass import FedCompassConfig
from seafl_dist.settings.fedstaleweight import FedStaleWeightConfig
from seafl_dist.settings.port import PortConfig
from seafl_dist.settings.server_opt import ServerOptConfig

ALGORITHMS = ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg", "ca2fl", "fadas", "asyncsgd", "port",
              "fedstaleweight", "fedcompass", "scaffold")
SIMILARITY_MODES = ("delta_vs_global", "model_vs_global", "delta_vs_movement")
SIMILARITY_OVER = ("parameters", "parameters_and_stats")

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
