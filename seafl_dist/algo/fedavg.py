"""FedAvg (McMahan et al. 2017; the paper's Eq. 3 with p_k = n_k / Σn).

    w_{t+1} = Σ_k (n_k / Σ_B n) · w_k

Σn runs over the accepted updates only. If it is 0 (every accepted update reports
n_k = 0) there is nothing to weight by: w_{t+1} = w_t and every weight is 0. Integer counters
(batch norm's ``num_batches_tracked``) are not averaged: they take the largest of w_t's and the
accepted models' (:func:`.common.carry_counters`, the same in every rule).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import as_global, carry_counters, flat_parts, screen
from .types import AggregationResult, BufferedUpdate, FlatParts


@torch.no_grad()
def fedavg(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
           updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
           parts: Optional[FlatParts] = None) -> AggregationResult:
    """Sample-weighted average of the accepted local models (``base_model`` is not called)."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    total = sum(updates[i].n_samples for i in accepted)
    if not accepted or total <= 0:
        return AggregationResult(global_flat.clone(), info)
    out = torch.zeros_like(global_flat)
    for i in accepted:
        weight = updates[i].n_samples / total
        out.add_(as_global(updates[i].flat, global_flat), alpha=weight)
        info[i]["weight"] = weight
    return AggregationResult(carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts), info)
