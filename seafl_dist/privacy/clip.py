"""Stage 3: each update's delta Δ_k = w_k − w_{t_k} scaled to L2 norm at most C (docs/privacy.md, "Clipping").

The norm runs over the trainable parameters and the float statistics (batch norm's running mean and variance):
both are averaged by every rule, so both carry a device's data into the aggregate. Integer counters
(``num_batches_tracked``) stay exact: they are the base's plus the steps trained, a function of the schedule and
n_k, and every rule takes their max (algo/common.py ``carry_counters``).

An update holding a NaN or an infinity counts as a zero delta (w̃_k = w_{t_k}, its counters included): rejecting
it, as the rules' value check does without DP, would change |B| by the data. An update of the wrong size or dtype
is left as it is for the rules to reject: that is a broken upload, not a value the data chose.

The clipped model is w̃_k = w_{t_k} + Δ_k · min(1, C/‖Δ_k‖), the norm and the scaling in float64, rounded once to
w_k's dtype. The rules then recompute w̃_k − w_{t_k} in float32, whose rounding can add a few ulps to its norm, so
the factor is shrunk until the realised float32 delta has norm ≤ C in float64 (one step in practice), each retry
with a margin 8 times the last (1e-7, 8e-7, ...: a delta far below the weights' scale, whose rounding errors are a
larger part of it, lands within the bound by the fourth or fifth), and after eight steps the update falls back to a
zero delta: the bound holds for the bits the rules see.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from ..algo.common import BaseModels, check_update
from ..algo.types import BufferedUpdate, FlatParts

F64 = torch.float64
_TRIES = 8


def _norm(x: torch.Tensor) -> float:
    return math.sqrt(float(torch.dot(x, x)))


@torch.no_grad()
def clip_one(flat: torch.Tensor, base: torch.Tensor, mask: torch.Tensor, bound: float) -> tuple[torch.Tensor, float]:
    """(w̃_k, ‖Δ_k‖ before clipping): ``flat`` with its ``mask`` entries' delta from ``base`` clipped to ``bound``;
    a non-finite ``flat`` gives ``base`` itself and norm NaN."""
    if not bool(torch.isfinite(flat).all()):
        return base.clone(), math.nan
    mask = mask.to(flat.device)
    b64 = base[mask].to(F64)
    delta = flat[mask].to(F64) - b64
    norm = _norm(delta)
    out = flat.clone()
    if norm <= bound:
        return out, norm
    factor = bound / norm
    for attempt in range(_TRIES):
        out[mask] = (b64 + delta * factor).to(flat.dtype)
        realised = _norm(out[mask].to(F64) - b64)
        if realised <= bound:
            return out, norm
        factor *= bound / realised * (1 - 1e-7 * 8 ** attempt)  # a margin that outgrows float32's rounding
    out[mask] = base[mask]
    return out, norm


@torch.no_grad()
def clip_updates(updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor], parts: FlatParts,
                 bound: float) -> tuple[list[BufferedUpdate], list[float]]:
    """The buffer with every update's delta clipped to ``bound`` over ``parts``' parameters and statistics, and
    each update's norm ‖Δ_k‖ before clipping (NaN for a non-finite update, which becomes a zero delta; None for
    one the rules will reject as broken). The inputs are not modified; an update within the bound is a copy."""
    if not bound > 0:
        raise ValueError(f"clipping bound {bound} must be > 0")
    mask = parts.params | parts.stats
    out, norms = [], []
    bases = None
    for u in updates:
        reason = check_update(u.flat, parts.numel)
        if reason is not None and reason != "non-finite":
            out.append(u)
            norms.append(None)
            continue
        if bases is None:
            bases = BaseModels(base_model, u.flat)
        clipped, norm = clip_one(u.flat, bases(u.base_version), mask, bound)
        out.append(dataclasses.replace(u, flat=clipped))
        norms.append(norm)
    return out, norms
