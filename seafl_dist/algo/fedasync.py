"""FedAsync (Xie et al. 2019): mix one local model into the global one.

    w_{t+1} = (1 − a) · w_t + a · w_k,   a = α_mix · f(S_k)

f is ``constant`` (1), ``polynomial`` ((1 + S)^(−a_poly)) or ``hinge``
(1 if S ≤ b, else 1 / (a_h · (S − b) + 1)).

FedAsync aggregates a buffer of one (K = 1). Should a buffer hold more, the updates
are mixed in one after another, in buffer order, each with its own a_k; every S_k is
measured against the same t (the version is bumped once, after the whole buffer).
The reported weight of update k is then its effective coefficient in w_{t+1},
a_k · Π_{j>k} (1 − a_j); with one update that is just a. ``info["a"]`` holds a_k
(None when rejected). Integer counters (batch norm's ``num_batches_tracked``) are not mixed:
they become the largest of w_t's and the accepted models' (:func:`.common.carry_counters`).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import as_global, carry_counters, flat_parts, screen
from .types import AggregationResult, BufferedUpdate, FlatParts


def staleness_factor_fedasync(S: int, cfg: AlgorithmConfig) -> float:
    """f(S) for ``cfg.staleness_fn`` with ``cfg.poly_a``, ``cfg.hinge_a``, ``cfg.hinge_b``."""
    if S < 0:
        raise ValueError(f"staleness {S} < 0")
    if cfg.staleness_fn == "constant":
        return 1.0
    if cfg.staleness_fn == "polynomial":
        return float((1.0 + S) ** (-cfg.poly_a))
    if cfg.staleness_fn == "hinge":
        if S <= cfg.hinge_b:
            return 1.0
        return 1.0 / (cfg.hinge_a * (S - cfg.hinge_b) + 1.0)
    raise ValueError(f"unknown staleness_fn {cfg.staleness_fn!r}; allowed: constant, polynomial, hinge")


@torch.no_grad()
def fedasync(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
             updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
             parts: Optional[FlatParts] = None) -> AggregationResult:
    """Mix each accepted update into w_t in order (``base_model`` is not called)."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    for entry in info:
        entry["a"] = None
    out = global_flat.clone()
    for i in accepted:
        a = cfg.mixing * staleness_factor_fedasync(info[i]["staleness"], cfg)
        out.mul_(1.0 - a).add_(as_global(updates[i].flat, global_flat), alpha=a)
        for j in accepted:  # earlier updates' coefficients shrink by (1 − a)
            if j == i:
                break
            info[j]["weight"] *= 1.0 - a
        info[i]["weight"] = a
        info[i]["a"] = a
    return AggregationResult(carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts), info)
