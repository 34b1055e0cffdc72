"""Pieces shared by every aggregation rule: screening updates, staleness, cosine, the delay-adaptive step size.

Every rule first screens the whole buffer (:func:`screen`), so an update that is not a
1-D floating tensor of w_t's size, or that holds a NaN or an infinity, is rejected
before anything is computed from w_t. A rejected update takes no part in the rule
(it is not counted in |B|, Σn or the normalisation) and is reported with weight 0.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from .types import AggregationResult, BufferedUpdate, FlatParts

_CHUNK = 1 << 20  # elements per float64 chunk in cosine(): bounds the extra memory


def check_update(flat: object, expected_numel: int) -> Optional[str]:
    """Why ``flat`` cannot be aggregated into a model of ``expected_numel`` entries, or None.

    Reasons: ``"wrong size: got X, expected Y"`` (X is the length of a 1-D tensor, the
    shape of any other), ``"wrong dtype: ..."``, ``"not a tensor: ..."``, ``"non-finite"``.
    """
    if not isinstance(flat, torch.Tensor):
        return f"not a tensor: got {type(flat).__name__}"
    if flat.dim() != 1 or flat.numel() != expected_numel:
        got = flat.numel() if flat.dim() == 1 else tuple(flat.shape)
        return f"wrong size: got {got}, expected {expected_numel}"
    if not flat.is_floating_point():
        return f"wrong dtype: got {flat.dtype}, expected a floating-point tensor"
    if not bool(torch.isfinite(flat).all()):
        return "non-finite"
    return None


def cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    """Cosine similarity Θ(x, y) of two equally long tensors, computed in float64.

    Sums run chunk by chunk in float64 (no float64 copy of a whole model is made). By
    definition here the cosine with a zero vector is 0 (orthogonal: SEAFL's Eq. 5 then
    gives s = μ/2). The result is clamped to [−1, 1] against rounding.
    """
    x, y = x.reshape(-1), y.reshape(-1)
    if x.numel() != y.numel():
        raise ValueError(f"cosine of tensors of different sizes: {x.numel()} and {y.numel()}")
    acc = torch.zeros(3, dtype=torch.float64, device=x.device)
    for i in range(0, x.numel(), _CHUNK):
        xc = x[i:i + _CHUNK].to(torch.float64)
        yc = y[i:i + _CHUNK].to(device=x.device, dtype=torch.float64)
        acc += torch.stack((torch.dot(xc, yc), torch.dot(xc, xc), torch.dot(yc, yc)))
    dot, xx, yy = acc.tolist()
    if xx == 0.0 or yy == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot / (math.sqrt(xx) * math.sqrt(yy))))


def flat_parts(parts: Optional[FlatParts], global_flat: torch.Tensor) -> FlatParts:
    """``parts`` checked against w_t's size; None means every entry is a trainable parameter."""
    if parts is None:
        return FlatParts.all_params(global_flat.numel())
    if parts.numel != global_flat.numel():
        raise ValueError(f"the flat layout has {parts.numel} entries, w_t has {global_flat.numel()}")
    return parts


def masked(x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """``x`` restricted to ``mask`` (no copy when the mask is None, i.e. everything)."""
    return x if mask is None else x[mask.to(x.device)]


def carry_counters(out: torch.Tensor, global_flat: torch.Tensor, models: list[torch.Tensor],
                   parts: FlatParts) -> torch.Tensor:
    """Set ``out``'s integer-counter entries to the largest of w_t's and the accepted models'.

    Every rule computes params and stats its own way; counters (batch norm's
    ``num_batches_tracked``) are not quantities to average, so every rule gives them the same
    value: max(w_t, w_k over the accepted updates), a whole number that never decreases.
    """
    if not bool(parts.counters.any()):
        return out
    idx = parts.counters.to(out.device)
    value = global_flat[idx]
    for w_k in models:
        value = torch.maximum(value, as_global(w_k, global_flat)[idx])
    out[idx] = value.round()
    return out


def staleness_of(version: int, update: BufferedUpdate) -> int:
    """S_k = t − t_k. A job from the future is a bug in the caller: ValueError."""
    s = int(version) - int(update.base_version)
    if s < 0:
        raise ValueError(f"update of device {update.device} job {update.job} has base_version "
                         f"{update.base_version} > current version {version}")
    return s


def delay_lr(lr: float, tau: int, threshold: int, c: float) -> float:
    """The delay-adaptive learning rate: ``lr`` while the staleness ``tau`` is at most ``threshold`` (τ_C), and
    min(lr, c/τ) above it (Koloskova et al. 2022, Eq. of their delay-adaptive step; FADAS's Algorithm 2 with
    τ = the buffer's largest staleness). Shared by ``asyncsgd`` and the server optimizers' ``delay_adaptive``."""
    if tau < 0:
        raise ValueError(f"staleness {tau} < 0")
    return lr if tau <= threshold else min(lr, c / tau)


def as_global(flat: torch.Tensor, global_flat: torch.Tensor) -> torch.Tensor:
    """``flat`` on w_t's device and dtype (no copy when it already is)."""
    return flat.to(device=global_flat.device, dtype=global_flat.dtype)


def screen(version: int, global_flat: torch.Tensor,
           updates: list[BufferedUpdate]) -> tuple[list[int], list[dict]]:
    """Check every update; return (indices of accepted updates, one info dict per update)."""
    if not isinstance(global_flat, torch.Tensor) or global_flat.dim() != 1 \
            or not global_flat.is_floating_point():
        raise ValueError("global_flat must be a 1-D floating-point tensor")
    accepted, info = [], []
    for i, u in enumerate(updates):
        if u.n_samples < 0:
            raise ValueError(f"update of device {u.device} job {u.job} has n_samples {u.n_samples} < 0")
        reason = check_update(u.flat, global_flat.numel())
        info.append({"weight": 0.0, "rejected": reason is not None, "reason": reason,
                     "staleness": staleness_of(version, u)})
        if reason is None:
            accepted.append(i)
    return accepted, info


class BaseModels:
    """``base_model(v)`` called at most once per version, checked and placed like w_t."""

    def __init__(self, base_model: Callable[[int], torch.Tensor], global_flat: torch.Tensor):
        self._fn, self._global, self._cache = base_model, global_flat, {}

    def __call__(self, version: int) -> torch.Tensor:
        if version not in self._cache:
            w = self._fn(version)
            if not isinstance(w, torch.Tensor) or w.numel() != self._global.numel():
                raise ValueError(f"base_model({version}) is not a tensor of {self._global.numel()} entries")
            self._cache[version] = as_global(w.reshape(-1), self._global)
        return self._cache[version]


@torch.no_grad()
def delta_step(version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
               base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts],
               coefficient: Callable[[dict, int], float]) -> AggregationResult:
    """w_t + Σ_k c_k Δ_k over the accepted updates (Δ_k = w_k − w_{t_k}), c_k = ``coefficient(info_k, |B|)`` (the
    update's info dict, with its staleness, and the accepted count) recorded as its weight; counters carried. With
    none accepted, w_{t+1} = w_t. FedBuff's and asyncsgd's step, one loop."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    out = global_flat.clone()
    if not accepted:
        return AggregationResult(out, info)
    bases = BaseModels(base_model, global_flat)
    for i in accepted:
        u = updates[i]
        coef = coefficient(info[i], len(accepted))
        out.add_(as_global(u.flat, global_flat) - bases(u.base_version), alpha=coef)
        info[i]["weight"] = coef
    return AggregationResult(carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts), info)
