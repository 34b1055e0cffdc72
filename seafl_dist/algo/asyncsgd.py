"""asyncsgd: delay-adaptive asynchronous SGD (Koloskova, Stich and Jaggi, NeurIPS 2022; Mishchenko et al., NeurIPS
2022), one update at a time:

    w_{t+1} = w_t + η_t Δ_k,   Δ_k = w_k − w_{t_k},   η_t = delay_lr(η, S_k, τ_C, c)

η_t = η while the staleness S_k = t − t_k is at most τ_C, min(η, c/S_k) above (:func:`.common.delay_lr`, the
function FADAS's delay adaptation uses). η, τ_C and c are ``algorithm.asyncsgd``'s keys (τ_C: the concurrency M
unless given). The rule is stateless: S_k is known from the update itself.

asyncsgd aggregates a buffer of one (K = 1, settings/core.py). Should a buffer hold more, each accepted update
takes its own step, every S_k measured against the same t (the version is bumped once, after the whole buffer):
w_{t+1} = w_t + Σ_k η_k Δ_k, which is the steps applied one after another. The reported weight of update k is η_k,
its coefficient on Δ_k. A rejected update (value check, guard) takes no step: with none accepted, w_{t+1} = w_t.
Integer counters take no step (:func:`.common.carry_counters`, as in every rule).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import delay_lr, delta_step
from .types import AggregationResult, BufferedUpdate, FlatParts


@torch.no_grad()
def asyncsgd(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
             updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
             parts: Optional[FlatParts] = None) -> AggregationResult:
    """w_t plus each accepted update's delta times its delay-adaptive η_k."""
    own = cfg.asyncsgd
    if own.tau_c is None:
        raise ValueError("algorithm.asyncsgd.tau_c is null: the config resolves it to devices.concurrency "
                         "(settings/core.py); give it when building an AlgorithmConfig alone")
    return delta_step(version, global_flat, updates, base_model, parts,
                      lambda info, n: delay_lr(own.lr, info["staleness"], own.tau_c, own.c))
