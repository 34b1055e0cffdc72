"""FedCompass's server step (Li et al., ICLR 2024; APPFL's ``FedCompassAggregator``, gradient-based, equal client
weights): a group's updates, each scaled by its staleness factor.

    w_{t+1} = w_t + α · Σ_k p_k · f(S_k) · Δ_k,   Δ_k = w_k − w_{t_k},   p_k = 1/N

with α = ``algorithm.fedcompass.alpha`` (0.9), N the devices (all of them train: M = N) and f FedAsync's staleness
function (``algorithm.staleness_fn``, ``poly_a``, ``hinge_a``, ``hinge_b``: :func:`.fedasync.staleness_factor_fedasync`).
The buffer is what sim/compass.py aggregates: the general buffer's late updates and a group's arrivals. The
reported weight of update k is its coefficient on Δ_k, α·f(S_k)/N. Integer counters are carried
(:func:`.common.carry_counters`), as in every rule.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import delta_step
from .fedasync import staleness_factor_fedasync
from .types import AggregationResult, BufferedUpdate, FlatParts


@torch.no_grad()
def fedcompass(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
               updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
               parts: Optional[FlatParts] = None) -> AggregationResult:
    """w_t plus α/N times the staleness-scaled sum of the accepted deltas."""
    if not cfg.num_devices:
        raise ValueError("fedcompass needs the number of devices N (cfg.num_devices) for p_k = 1/N")
    scale = cfg.fedcompass.alpha / cfg.num_devices
    return delta_step(version, global_flat, updates, base_model, parts,
                      lambda info, _n: scale * staleness_factor_fedasync(info["staleness"], cfg))
