"""SCAFFOLD (Karimireddy et al., ICML 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning",
Algorithm 1 with option II) on FedBuff's buffer: the server step of the model is FedBuff's, and the server's
control variate c moves by the buffer's control deltas.

    w_{t+1} = w_t + η_g · (1/|B|) · Σ_k s_k · Δy_k,     Δy_k = w_k − w_{t_k}   (FedBuff's step, s_k its scaling)
    c_{t+1} = c_t + (1/N) · Σ_k Δc_k                                            (Algorithm 1, line 17: (|S|/N)·mean)

with η_g = ``algorithm.server_lr``, N every device of the run (``cfg.num_devices``, as CA²FL's mean) and Δc_k the
job's c_k⁺ − c_k, computed where the device trains (runtime/controls.py): c_k⁺ = c_k − c + (x − y)/(K·η_l), x the
job's start, y its trained model, K the steps it trained, η_l = ``train.lr``.

- **c is versioned like the model bases**: the state holds c_v for the versions the server still keeps
  (``{"c": {v: c_v}}``, c_0 = 0); a job that starts from version v downloads w_v and c_v (runtime/controls.py prunes
  the versions no job needs any more). The sum runs in float64 and is rounded to float32 once.
- **c is over the trainable parameters only** (``parts.params``): statistics and counters have no gradient.
- **A rejected update** (non-finite or wrongly sized model or Δc, or the update guard's) moves neither w nor c,
  and its device keeps its c_k (the worker is told so with the job's TAKEN, runtime/controls.py).
- **Weights** in ``info``: FedBuff's, η_g · s_k / |B|.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .ca2fl import num_devices
from .common import BaseModels, as_global, carry_counters, check_update, flat_parts, screen
from .fedbuff import fedbuff_scale
from .types import AggregationResult, BufferedUpdate, FlatParts

F64 = torch.float64


def control_at(state: Mapping, version: int, n_params: int, device=None) -> torch.Tensor:
    """c_v from the rule's state (zero before the first aggregation that moved it)."""
    c = state.get("c", {}).get(version)
    return torch.zeros(n_params, dtype=torch.float32, device=device) if c is None else c


@torch.no_grad()
def scaffold(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
             base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None, *,
             state: Mapping) -> AggregationResult:
    """FedBuff's step of w over the accepted updates, and c_{t+1} = c_t + (1/N) Σ Δc_k over the same."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    n_params = int(parts.params.sum())
    for i in list(accepted):
        why = check_update(updates[i].control, n_params)
        if why is not None:
            info[i].update(rejected=True, reason=f"control variate: {why}")
            accepted.remove(i)
    c_now = control_at(state, version, n_params)
    out, c_sum = global_flat.clone(), None
    if accepted:
        bases = BaseModels(base_model, global_flat)
        for i in accepted:
            u = updates[i]
            coef = cfg.server_lr * fedbuff_scale(info[i]["staleness"], cfg.staleness_scaling) / len(accepted)
            out.add_(as_global(u.flat, global_flat) - bases(u.base_version), alpha=coef)
            info[i]["weight"] = coef
            dc = u.control.to(device="cpu", dtype=F64)
            c_sum = dc if c_sum is None else c_sum.add_(dc)
        out = carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts)
    c_new = c_now if c_sum is None else \
        c_sum.mul_(1.0 / num_devices(cfg)).add_(c_now.to(F64)).to(torch.float32)  # c + (1/N) Σ Δc, rounded once
    kept = {**state.get("c", {}), version + 1: c_new}  # shares every other version's c
    return AggregationResult(out, info, state={"c": kept})
