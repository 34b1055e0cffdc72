"""Server optimizers: what the server does with the rule's result w′ (SPEC "One aggregation, end to end", stage 6).

This module owns stage 6 and nothing else: the step the rule's result gives, the optimizers' equations and
state, and which entries of the flat model they move. ``algorithm.server_opt.name: none`` (the default) builds
no optimizer: w_{t+1} = w′, the very tensor the rule returned (a step of SGD at lr 1 would not be bitwise w′).

With Δ_t = w′ − w_t = −g_t (Reddi et al.'s Δ_t; g_t the pseudo-gradient), η = ``lr``, β₁, β₂, τ:

    momentum   m_t = β₁ m_{t−1} + Δ_t                                  w_{t+1} = w_t + η m_t
    adam       m_t = β₁ m_{t−1} + (1 − β₁) Δ_t   v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²
    yogi       m_t as adam                        v_t = v_{t−1} − (1 − β₂) Δ_t² sign(v_{t−1} − Δ_t²)
    adagrad    m_t as adam                        v_t = v_{t−1} + Δ_t²
               (adam, yogi, adagrad)              w_{t+1} = w_t + η m_t / (√v_t + τ)
    amsgrad    m_t, v_t as adam                   v̂_t = max(v̂_{t−1}, v_t)    w_{t+1} = w_t + η m_t / (√v̂_t + τ)

The last three are Algorithm 2 of Reddi et al., *Adaptive Federated Optimization* (ICLR 2021), as written:
m_{−1} = 0, v_{−1} = τ² (the least its v_{−1} ≥ τ² allows), τ outside the root, no bias correction. That is
not ``torch.optim.Adam`` (m/(1 − β₁^t), v/(1 − β₂^t), v_{−1} = 0), which FLSim's server Adam is. ``momentum``
is FedAvgM (Hsu et al. 2019; Flower's FedAvgM): heavy-ball momentum without dampening, so β₁ = 0, η = 1 is
w′ itself (up to rounding).
``amsgrad`` (Reddi, Kale and Kumar 2018; FADAS's server step, Wang et al. 2024) is the same family: v̂_{−1} = τ²
too, no bias correction (docs/algorithms.md, "FADAS", names where the paper and its official code differ).

**Delay-adaptive η** (``delay_adaptive``, FADAS's Algorithm 2): with τ the largest staleness among the
aggregation's accepted updates, every optimizer steps with η_t = :func:`.common.delay_lr` (η, τ, τ_C, c) in
place of η: η while τ ≤ τ_C, min(η, c/τ) above. The staleness is the schedule's, so under DP the step stays
post-processing of the released w′.

Choices, fixed here:
- **Which entries**: the trainable parameters only. Batch norm's running mean and variance are estimates, not
  descended: a normalised step (Adam moves every entry by about η whatever its scale) could drive a variance
  below 0. They take w′'s values, as the integer counters do (the rule's max, :func:`.common.carry_counters`).
  FLSim's server optimizers, too, hold ``model.parameters()`` only.
- **Precision**: m, v and the step are float64; w_{t+1} is w_t + step rounded once to w_t's dtype.
- **No step without an update**: when every update of the aggregation was rejected (value check, guard),
  w_{t+1} = w′ (= w_t) and m, v stay as they were: momentum never moves the model on its own.
- **What the optimizer steps on** (``pseudo_gradient``): ``model``, Δ_t = w′ − w_t, for any rule, a user's own
  included; or ``delta``, Δ_t = Σ_k c_k (w_k − w_{t_k}), the rule applied to the updates' deltas, with c_k the
  coefficient of w_k in w′ (:func:`coefficients`). For a rule that averages models, w′ − w_t =
  Σ c_k Δ_k − Σ c_k (w_t − w_{t_k}): the second sum is the server's own drift while the jobs trained (SEAFL:
  ϑ Σ p_k (w_t − w_{t_k})), fed back into m and amplified by momentum; ``delta`` leaves it out.
- **State**: :class:`ServerOptState`, frozen and replaced at every step, so a snapshot of the end of an
  aggregation (runtime/snapshots.py) never sees a later step; it goes into every checkpoint.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import as_global, delay_lr, masked
from .types import AggregationResult, BufferedUpdate, FlatParts

F64 = torch.float64


@dataclass(frozen=True, eq=False)
class ServerOptState:
    """m and v over the trainable parameters (float64; None before the first step), the steps taken, and amsgrad's
    v̂ (``vmax``, None for the other optimizers)."""

    m: Optional[torch.Tensor] = None
    v: Optional[torch.Tensor] = None
    steps: int = 0
    vmax: Optional[torch.Tensor] = None

    def to_dict(self) -> dict:
        """Plain tensors and numbers, on the CPU: what a checkpoint holds (``torch.load(weights_only=True)``);
        ``vmax`` only where there is one, so another optimizer's checkpoint holds what it held before amsgrad."""
        cpu = {k: None if t is None else t.detach().cpu() for k, t in (("m", self.m), ("v", self.v))}
        vmax = {} if self.vmax is None else {"vmax": self.vmax.detach().cpu()}
        return {**cpu, "steps": self.steps, **vmax}

    @classmethod
    def from_dict(cls, d: Optional[dict]) -> "ServerOptState":
        """The state a checkpoint holds; one written before amsgrad existed has no ``vmax`` (None)."""
        return cls() if not d else cls(d.get("m"), d.get("v"), int(d.get("steps", 0)), d.get("vmax"))


def optimizer_step(name: str, state: ServerOptState, delta: torch.Tensor, *, lr: float, beta1: float,
                   beta2: float, tau: float) -> tuple[torch.Tensor, ServerOptState]:
    """(w_{t+1} − w_t, the state after) for one Δ_t (float64), by the equations above. Inputs are not changed."""
    m_prev = torch.zeros_like(delta) if state.m is None else state.m.to(delta.device)
    if name == "momentum":
        m = m_prev * beta1 + delta
        return m * lr, ServerOptState(m, None, state.steps + 1)
    m = m_prev * beta1 + delta * (1.0 - beta1)
    v_prev = torch.full_like(delta, tau * tau) if state.v is None else state.v.to(delta.device)
    sq = delta * delta
    if name == "adam":
        v = v_prev * beta2 + sq * (1.0 - beta2)
    elif name == "yogi":
        v = v_prev - sq * (1.0 - beta2) * torch.sign(v_prev - sq)
    elif name == "adagrad":
        v = v_prev + sq
    elif name == "amsgrad":
        v = v_prev * beta2 + sq * (1.0 - beta2)
        vmax_prev = torch.full_like(delta, tau * tau) if state.vmax is None else state.vmax.to(delta.device)
        vmax = torch.maximum(vmax_prev, v)
        return m / (vmax.sqrt() + tau) * lr, ServerOptState(m, v, state.steps + 1, vmax)
    else:
        raise ValueError(f"unknown server optimizer {name!r}; allowed: momentum, adam, yogi, adagrad, amsgrad")
    return m / (v.sqrt() + tau) * lr, ServerOptState(m, v, state.steps + 1)


def coefficients(cfg: AlgorithmConfig, info: list[dict]) -> list[float]:
    """c_k, the coefficient of w_k (or of Δ_k, for FedBuff) in the built-in rule's w′; 0 for a rejected update.

    The trace's weights are the rule's: SEAFL's p_k before Eq. 8 (so c_k = ϑ p_k), FedAsync's effective
    coefficient, FedAvg's n_k / Σn, FedBuff's η_g c_k / |B|."""
    scale = cfg.theta if cfg.rule == "seafl" else 1.0
    return [0.0 if d.get("rejected") else scale * float(d["weight"]) for d in info]


@torch.no_grad()
def rule_step(cfg: AlgorithmConfig, global_flat: torch.Tensor, result: AggregationResult,
              updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
              mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Δ_t = −g_t in float64 on the entries ``mask`` selects (None: all): w′ − w_t (``model``), or
    Σ c_k (w_k − w_{t_k}) (``delta``)."""
    if cfg.server_opt.pseudo_gradient == "model":
        return masked(result.new_global, mask).to(F64) - masked(global_flat, mask).to(F64)
    out = torch.zeros(int(mask.sum()) if mask is not None else global_flat.numel(), dtype=F64,
                      device=global_flat.device)
    bases: dict[int, torch.Tensor] = {}
    for u, c in zip(updates, coefficients(cfg, result.info)):
        if c == 0.0:
            continue
        if u.base_version not in bases:
            bases[u.base_version] = masked(as_global(base_model(u.base_version).reshape(-1), global_flat), mask).to(F64)
        out.add_(masked(as_global(u.flat, global_flat), mask).to(F64) - bases[u.base_version], alpha=c)
    return out


class ServerOptimizer:
    """Stage 6 of a run's aggregations: the configured optimizer and its state (checkpointed by the server)."""

    def __init__(self, cfg: AlgorithmConfig, parts: Optional[FlatParts] = None):
        self.cfg, self.state = cfg, ServerOptState()
        params = parts.params if parts is not None else None
        self.mask = None if params is None or bool(params.all()) else params

    @property
    def active(self) -> bool:
        return self.cfg.server_opt.name != "none"

    @torch.no_grad()
    def apply(self, global_flat: torch.Tensor, result: AggregationResult, updates: list[BufferedUpdate],
              base_model: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """w_{t+1} from w_t and the rule's result: w′ itself with ``none`` or when every update was rejected."""
        if not self.active or all(d.get("rejected") for d in result.info):
            return result.new_global
        opt, mask = self.cfg.server_opt, self.mask
        delta = rule_step(self.cfg, global_flat, result, updates, base_model, mask)
        step, self.state = optimizer_step(opt.name, self.state, delta, lr=self.lr_of(result.info), beta1=opt.beta1,
                                          beta2=opt.beta2, tau=opt.tau)
        new = (masked(global_flat, mask).to(F64) + step).to(global_flat.dtype)
        out = result.new_global.clone()
        if mask is None:
            out.copy_(new)
        else:
            out[mask.to(out.device)] = new
        return out

    def lr_of(self, info: list[dict]) -> float:
        """η_t of this aggregation: η, or with ``delay_adaptive`` the delay-adaptive η_t for τ the largest
        staleness among the accepted updates (:func:`.common.delay_lr`)."""
        opt = self.cfg.server_opt
        if not opt.delay_adaptive:
            return opt.lr
        tau = max(int(d["staleness"]) for d in info if not d.get("rejected"))
        return delay_lr(opt.lr, tau, opt.delay_threshold, opt.delay_c)

    def state_dict(self) -> Optional[dict]:
        """The state a checkpoint keeps; None with ``none`` (the checkpoint then has no such entry)."""
        return self.state.to_dict() if self.active else None

    def load_state_dict(self, d: Optional[dict]) -> None:
        self.state = ServerOptState.from_dict(d)
