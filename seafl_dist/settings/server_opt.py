"""The ``algorithm.server_opt`` section: the server optimizer, stage 6 of SPEC's "One aggregation, end to
end" (seafl_dist/algo/server_opt.py computes it; docs/algorithms.md, "Server optimizers", says why each choice).

``name: none``, the default, is no optimizer at all: w_{t+1} is the rule's w′, byte for byte. The other names
step on the rule's result with learning rate ``lr``: ``momentum`` (FedAvgM) with β₁ as its momentum, and
``adam``, ``yogi`` and ``adagrad`` as Reddi et al.'s Algorithm 2 defines them (β₁, β₂, τ; v starts at τ², no
bias correction), and ``amsgrad``, Adam with the running maximum v̂ of v in the denominator (FADAS's server step).
The delay-adaptive learning rate (``delay_adaptive``, ``delay_threshold``, ``delay_c``: FADAS's) is an option of
every optimizer. The section is left out of config.yaml when every key is at its default, and the delay keys are
left out at theirs, so the file of a run without an optimizer, or with one from before they existed, is what it was.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key

OPTIMIZERS = ("none", "momentum", "adam", "yogi", "adagrad", "amsgrad")
PSEUDO_GRADIENTS = ("model", "delta")
# η when `lr` is not given: Flower's defaults (FedAvgM's server_learning_rate, FedAdam's and FedAdagrad's eta,
# FedYogi's eta); Reddi et al. tune η per task on a grid, and so should a study. amsgrad: yogi's 0.01 (FADAS's
# official code tunes η per task too: docs/algorithms.md, "FADAS")
DEFAULT_LR = {"momentum": 1.0, "adam": 0.1, "adagrad": 0.1, "yogi": 0.01, "amsgrad": 0.01}
BUILT_IN_RULES = ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg", "port", "fedstaleweight")  # rules whose w′ is linear in the w_k
# FADAS's delay adaptation at its defaults (algorithm.name=fadas): τ_C = 1 as the official code's `--tauc`, c = 1
# as the paper's min(η, 1/τ_max) (docs/algorithms.md, "FADAS")
FADAS_THRESHOLD, FADAS_C = 1, 1.0


@dataclass(kw_only=True)
class ServerOptConfig:
    """What the server does with the rule's result w′ (stage 6): `none`, or an optimizer stepping on it."""

    name: str = key("none", "the server optimizer: `none` (w_{t+1} = w′, the rule's result), `momentum` (FedAvgM), "
                    "`adam`, `yogi` or `adagrad` (Reddi et al. 2021, Algorithm 2), or `amsgrad` (FADAS's)", OPTIMIZERS,
                    note="It steps on the pseudo-gradient g = w_t − w′ over the trainable parameters, in float64; "
                         "batch norm's statistics and integer counters take w′'s values. An aggregation whose every "
                         "update was rejected takes no step (w_{t+1} = w_t; the moments stay). FedBuff's "
                         "`algorithm.server_lr` is then folded into `lr` (it must stay 1); SEAFL's ϑ and FedAsync's "
                         "mixing stay in the rule and scale g (docs/algorithms.md, \"Server optimizers\"). Its m and v "
                         "are in the checkpoints. Left out of config.yaml (the whole section) at its defaults.")
    lr: Optional[float] = key(None, "η: the optimizer's learning rate; `null`: its default", "(0, inf)",
                              shown="`null`: momentum `1.0`, adam and adagrad `0.1`, yogi and amsgrad `0.01`")
    beta1: float = key(0.9, "β₁: the first moment's decay (adam, yogi, adagrad), or momentum's coefficient", "[0, 1)")
    beta2: float = key(0.99, "β₂: the second moment's decay (adam, yogi)", "[0, 1)")
    tau: float = key(1e-3, "τ: the adaptivity (adam, yogi, adagrad, amsgrad): w += η m / (√v + τ), v (and amsgrad's "
                     "v̂) starting at τ²", "(0, inf)")
    pseudo_gradient: str = key("model", "what the optimizer steps on: `model`, g = w_t − w′; or `delta`, the rule "
                               "applied to the deltas w_k − w_{t_k}", PSEUDO_GRADIENTS,
                               note="For SEAFL and FedAsync, which average models, g = w_t − w′ also holds the "
                                    "server's own drift since each job started, ϑ Σ p_k (w_t − w_{t_k}) (FedAsync: "
                                    "a (w_t − w_{t_k})), which momentum and Adam amplify; `delta` leaves it out: "
                                    "g = −Σ c_k (w_k − w_{t_k}), c_k the coefficient of w_k in w′ (SEAFL: ϑ p_k). "
                                    "FedBuff and FedAvg give the same g either way (FedAvg's jobs all start from "
                                    "w_t). Built-in rules only.")
    delay_adaptive: Optional[bool] = key(
        None, "the delay-adaptive learning rate: η_t = η while the buffer's largest staleness τ is at most "
              "`delay_threshold`, min(η, `delay_c`/τ) above; `null`: on for fadas, off otherwise",
        shown="`null` (on for fadas)",
        note="τ is the largest staleness among the aggregation's accepted updates (FADAS's τ_max). With c = η it is "
             "the official FADAS code's η/τ; with c = 1 the paper's min(η, 1/τ) (docs/algorithms.md, \"FADAS\"). "
             "Refused with `name: none` (no step to scale). The three delay keys are left out of config.yaml at "
             "their defaults.")
    delay_threshold: int = key(FADAS_THRESHOLD, "τ_C: the largest staleness at which the delay-adaptive η_t is η",
                               "[0, inf)")
    delay_c: float = key(FADAS_C, "c: above τ_C the delay-adaptive η_t is min(η, c/τ)", "(0, inf)")

    def __post_init__(self) -> None:
        if self.lr is None:
            self.lr = DEFAULT_LR.get(self.name)
        check_fields(self, "algorithm.server_opt")
        if self.name == "none" and self.pseudo_gradient == "delta":
            _fail("algorithm.server_opt.pseudo_gradient", self.pseudo_gradient,
                  "model with algorithm.server_opt.name=none (no optimizer: w_{t+1} is the rule's w′; the rule on "
                  "the deltas alone is momentum with beta1=0, lr=1)")

    def as_fadas(self) -> None:
        """FADAS's preset (algorithm.name=fadas): amsgrad with the delay-adaptive η_t unless the config says
        otherwise; another optimizer is refused (FADAS is AMSGrad's step)."""
        if self.name not in ("none", "amsgrad"):
            _fail("algorithm.server_opt.name", self.name, "amsgrad (or not given) with algorithm.name=fadas (FADAS "
                  "is FedBuff with AMSGrad's server step; for another optimizer use algorithm.name=fedbuff)")
        self.name = "amsgrad"
        self.lr = DEFAULT_LR["amsgrad"] if self.lr is None else self.lr
        self.delay_adaptive = True if self.delay_adaptive is None else self.delay_adaptive

    def check_with_rule(self, rule: str, server_lr: float) -> None:
        """What the optimizer asks of the rule: FedBuff's η_g folded into ``lr``, the delta form of a built-in; and
        a step to scale for the delay-adaptive η (checked here, after fadas's preset named its optimizer)."""
        if self.name == "none" and self.delay_adaptive:
            _fail("algorithm.server_opt.delay_adaptive", True, "false or null with algorithm.server_opt.name=none "
                  "(no optimizer: w_{t+1} is the rule's w′, with no step to scale; momentum with beta1=0 is a plain "
                  "step of η)")
        if self.name != "none" and rule == "fedbuff" and server_lr != 1.0:
            _fail("algorithm.server_lr", server_lr, f"1.0 with algorithm.server_opt.name={self.name}: FedBuff's η_g "
                  f"is the optimizer's step: set algorithm.server_opt.lr instead")
        if self.name != "none" and self.pseudo_gradient == "delta" and rule == "ca2fl":
            _fail("algorithm.server_opt.pseudo_gradient", self.pseudo_gradient, "model with algorithm.name=ca2fl (its "
                  "w′ also moves by the cached updates of earlier aggregations: no coefficient per update of this "
                  "buffer gives it)")
        if self.pseudo_gradient == "delta" and rule not in BUILT_IN_RULES:
            _fail("algorithm.server_opt.pseudo_gradient", self.pseudo_gradient,
                  f"model with a rule of your own ({rule}): the delta form needs each update's coefficient in w′, "
                  f"which only the built-in rules define")
