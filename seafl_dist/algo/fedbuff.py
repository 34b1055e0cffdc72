"""FedBuff (Nguyen et al. 2022): a server step along the buffer's mean delta.

    w_{t+1} = w_t + η_g · (1/|B|) · Σ_k c_k · Δ_k,   Δ_k = w_k − w_{t_k}

with η_g = ``server_lr`` and c_k = 1 (``staleness_scaling: none``) or
c_k = 1/√(1 + S_k) (``sqrt``). |B| counts the accepted updates only. The reported
weight of update k is its coefficient on Δ_k, η_g · c_k / |B| (these need not sum to 1).
Integer counters (batch norm's ``num_batches_tracked``) take no step: they become the largest
of w_t's and the accepted models' (:func:`.common.carry_counters`, the same in every rule).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import delta_step
from .types import AggregationResult, BufferedUpdate, FlatParts


def fedbuff_scale(staleness: int, scaling: str) -> float:
    """c_k: 1 for ``none``, 1/√(1+S) for ``sqrt``."""
    if scaling == "none":
        return 1.0
    if scaling == "sqrt":
        return 1.0 / math.sqrt(1.0 + staleness)
    raise ValueError(f"unknown staleness_scaling {scaling!r}; allowed: none, sqrt")


@torch.no_grad()
def fedbuff(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
            updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
            parts: Optional[FlatParts] = None) -> AggregationResult:
    """w_t plus η_g times the (optionally staleness-scaled) mean of the accepted deltas."""
    return delta_step(version, global_flat, updates, base_model, parts, lambda info, n: cfg.server_lr * fedbuff_scale(
        info["staleness"], cfg.staleness_scaling) / n)
