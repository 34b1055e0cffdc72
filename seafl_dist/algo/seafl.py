"""SEAFL's adaptive weighted aggregation (paper Eq. 4–8).

    γ_k = α · β / (S_k + β)                       (Eq. 4, staleness factor)
    s_k = μ · (Θ(x_k, y) + 1) / 2                 (Eq. 5, importance factor)
    p_k = (n_k / Σ_B n) · (γ_k + s_k)             (Eq. 6), then p normalised to sum 1
    w_new = Σ_k p_k · w_k                         (Eq. 7)
    w_{t+1} = (1 − ϑ) · w_t + ϑ · w_new           (Eq. 8)

Choices the paper leaves open, fixed here:
- β = None means β = ∞: γ_k = α for every update (the limit of Eq. 4).
- β = 0 with S_k = 0 (the 0/0 case, e.g. a FedAvg-like synchronous setting): γ_k = α,
  the value Eq. 4 gives for S = 0 at every β > 0. β = 0 with S_k > 0 gives γ_k = 0.
- Θ is the cosine similarity, computed in float64; Θ with a zero vector is 0, so
  s_k = μ/2 (e.g. ``delta_vs_movement`` when the global model has not moved, S_k = 0).
- ``similarity`` picks (x_k, y): ``delta_vs_global`` x = Δ_k = w_k − w_{t_k}, y = w_t
  (Eq. 5 as written); ``model_vs_global`` x = w_k, y = w_t; ``delta_vs_movement``
  x = Δ_k, y = w_t − w_{t_k}.
- Θ runs over the trainable parameters (``similarity_over: parameters``, the default) or the
  parameters and the floating-point statistics such as batch norm's running mean and variance
  (``parameters_and_stats``); never over integer counters (``num_batches_tracked``). With the
  counters in, they dominate ResNet-18's vector: two updates with opposite weight deltas both
  scored cos ≈ 0.96-0.9999, so s_k was the same for every update. Counters are carried, not
  averaged: w_{t+1}'s are the largest of w_t's and the accepted models' (as in every rule).
- Σ_B n and the normalisation run over the accepted updates only. If Σ p_k is 0 (say
  α = 0 and every cosine is −1, or every n_k = 0) there is nothing to normalise:
  w_{t+1} = w_t and every weight is 0 (γ, s, cos are still reported).

Lemma 1: for finite β and S_k ≤ β, γ_k ∈ [α/2, α] and s_k ∈ [0, μ], so the
pre-normalisation p_k lies in [α/2 · d_k, (α + μ) · d_k] with d_k = n_k / Σ_B n
(:func:`seafl_raw_weights` returns those p_k).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from ..settings import AlgorithmConfig
from .common import BaseModels, as_global, carry_counters, cosine, flat_parts, masked, screen
from .types import AggregationResult, BufferedUpdate, FlatParts


def seafl_gamma(S: int, alpha: float, beta: Optional[float]) -> float:
    """Eq. 4: γ = α · β / (S + β); α when β is None (∞) or when β = S = 0."""
    if S < 0:
        raise ValueError(f"staleness {S} < 0")
    if beta is None or S + beta == 0:
        return float(alpha)
    return float(alpha) * beta / (S + beta)


def seafl_importance(cos: float, mu: float) -> float:
    """Eq. 5: s = μ · (Θ + 1) / 2, in [0, μ] for Θ ∈ [−1, 1]."""
    return float(mu) * (cos + 1.0) / 2.0


def seafl_raw_weights(n_samples: Sequence[int], staleness: Sequence[int], cosines: Sequence[float],
                      alpha: float, beta: Optional[float], mu: float) -> list[tuple[float, float, float]]:
    """Eq. 4–6 before normalisation: one (γ_k, s_k, p_k) per update.

    d_k = n_k / Σ n over the given updates (0 for all when Σ n = 0).
    """
    total = sum(n_samples)
    out = []
    for n, S, c in zip(n_samples, staleness, cosines, strict=True):
        d = n / total if total > 0 else 0.0
        gamma, s = seafl_gamma(S, alpha, beta), seafl_importance(c, mu)
        out.append((gamma, s, d * (gamma + s)))
    return out


def seafl_cosine(similarity: str, w_k: torch.Tensor, w_t: torch.Tensor, w_base: Callable[[], torch.Tensor],
                 mask: Optional[torch.Tensor] = None) -> float:
    """Θ(x_k, y) of Eq. 5 for a ``similarity`` mode over the entries ``mask`` selects (None: all);
    ``w_base()`` gives w_{t_k} when needed."""
    w_k, w_t = masked(w_k, mask), masked(w_t, mask)
    if similarity == "model_vs_global":
        return cosine(w_k, w_t)
    if similarity == "delta_vs_global":
        return cosine(w_k - masked(w_base(), mask), w_t)
    if similarity == "delta_vs_movement":
        base = masked(w_base(), mask)
        return cosine(w_k - base, w_t - base)
    raise ValueError(f"unknown similarity {similarity!r}; allowed: delta_vs_global, "
                     "model_vs_global, delta_vs_movement")


@torch.no_grad()
def seafl(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
          updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
          parts: Optional[FlatParts] = None) -> AggregationResult:
    """SEAFL's Eq. 4–8 over the accepted updates (also SEAFL²'s rule)."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    mask = parts.similarity_mask(cfg.similarity_over)
    for entry in info:
        entry.update(gamma=None, s=None, cos=None)
    if not accepted:
        return AggregationResult(global_flat.clone(), info)
    bases = BaseModels(base_model, global_flat)
    models = [as_global(updates[i].flat, global_flat) for i in accepted]
    cosines = [seafl_cosine(cfg.similarity, w_k, global_flat, lambda v=updates[i].base_version: bases(v), mask)
               for i, w_k in zip(accepted, models)]
    raw = seafl_raw_weights([updates[i].n_samples for i in accepted],
                            [info[i]["staleness"] for i in accepted],
                            cosines, cfg.alpha, cfg.staleness_limit, cfg.mu)
    for i, c, (gamma, s, _) in zip(accepted, cosines, raw):
        info[i].update(gamma=gamma, s=s, cos=c)
    total = sum(p for _, _, p in raw)
    if not total > 0:
        return AggregationResult(global_flat.clone(), info)
    w_new = torch.zeros_like(global_flat)
    for i, w_k, (_, _, p) in zip(accepted, models, raw):
        info[i]["weight"] = p / total
        w_new.add_(w_k, alpha=p / total)  # Eq. 7
    out = w_new.mul_(cfg.theta).add_(global_flat, alpha=1.0 - cfg.theta)  # Eq. 8
    return AggregationResult(carry_counters(out, global_flat, models, parts), info)


@torch.no_grad()
def seafl_on_deltas(cfg: AlgorithmConfig, global_flat: torch.Tensor, updates: list[BufferedUpdate],
                    result: AggregationResult, base_model: Callable[[int], torch.Tensor],
                    parts: Optional[FlatParts] = None) -> AggregationResult:
    """Eq. 7 on the deltas, with the weights :func:`seafl` gave (``result``): w_{t+1} = w_t + ϑ Σ_k p_k Δ_k,
    Δ_k = w_k − w_{t_k} (counters carried as in every rule). The paper's Eq. 7 averages the models w_k themselves,
    so its w_{t+1} also mixes the bases w_{t_k}; this form adds every update's change to the current model, as
    FedBuff does, and is what user-level DP runs by default (docs/privacy.md, "SEAFL")."""
    parts = flat_parts(parts, global_flat)
    bases = BaseModels(base_model, global_flat)
    out, models = global_flat.clone(), []
    for u, entry in zip(updates, result.info):
        if entry["rejected"] or not entry["weight"]:
            continue
        w_k = as_global(u.flat, global_flat)
        models.append(w_k)
        out.add_(w_k - bases(u.base_version), alpha=cfg.theta * entry["weight"])
    return AggregationResult(carry_counters(out, global_flat, models, parts), result.info, result.norms)
