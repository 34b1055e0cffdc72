"""The defense stage of one aggregation, between Screen (2) and Clip (3) of SPEC's "One aggregation, end to end",
as algo/dispatch.py's ``aggregate`` calls it.

- :func:`rejections`: a filter's drops (Krum, Multi-Krum, Zeno++, AsyncFilter; Bulyan's selection), made with the update guard's,
  before the rule runs, among the updates the value check and the guard kept; the rule sees only the rest.
- :func:`estimator_rule`: the function that replaces FedBuff's rule when an estimator is on,
  w′ = w_t + η_g · est({c_k Δ_k}) with c_k FedBuff's staleness scale (1, or 1/√(1+S_k)), over the parameters and
  statistics; counters carried as by every rule (algo/common.py). Centered clipping's is a rule with memory
  (algo/memory.py): its state is the centre, ``{"centre": v}`` (float64, counters 0), in every checkpoint.
  FLTrust's reads the server's own update g_0 at w_t from the memory's ``server`` (runtime/server_data.py), and its
  trace weight for update k is its real coefficient, η_g TS_k ‖g_0‖ / (‖Δ_k‖ Σ TS), with ``trust`` TS_k.

An estimator's trace weight for update k is the coefficient FedBuff's mean would give it, η_g c_k / n: the estimator
itself gives no weight per update. Off (``algorithm.defense.name: none``), neither is called.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..algo.common import BaseModels, carry_counters, flat_parts, screen
from ..algo.fedbuff import fedbuff_scale
from ..algo.types import AggregationResult, BufferedUpdate, FlatParts
from functools import partial
from types import MappingProxyType

from . import asyncfilter
from .estimators import centered_clipping, coordinatewise, fltrust
from .filters import bulyan_selection, multi_krum, zeno_drops, zeno_scores
from .geometry import Deltas, pairwise_sq_distances, params_mask
from .registry import DEFENSES


def rejections(defense, updates: list[BufferedUpdate], bases: BaseModels, global_flat: torch.Tensor,
               parts: Optional[FlatParts], refused: dict[int, str], norms: list, version: int = 0,
               memory=None) -> dict[int, str]:
    """{position: reason} of the updates the defense's filter drops, among those neither the value check (a norm
    of None) nor the guard (``refused``) rejected; {} for a defense without a filter. Zeno++ reads v from
    ``memory`` (its ``defense_state``, refreshed from ``memory.server`` when due)."""
    if not DEFENSES[defense.name].drops:
        return {}
    screened = [i for i, n in enumerate(norms) if n is not None and i not in refused]
    if not screened:
        return {}
    if defense.name == "asyncfilter":
        drops, memory.defense_state = asyncfilter.screen(
            [updates[i] for i in screened], bases, global_flat, version, memory.defense_state, defense.group_min,
            defense.history, params_mask(parts))
        return {screened[j]: why for j, why in drops.items()}
    if defense.name == "zenopp":
        v = zeno_reference(defense, version, global_flat, memory)
        scores = zeno_scores(Deltas([updates[i] for i in screened], bases, global_flat), v, params_mask(parts),
                             defense.gamma, defense.rho)
        return {screened[j]: why for j, why in zeno_drops(scores, defense.gamma, defense.epsilon).items()}
    dist = pairwise_sq_distances(Deltas([updates[i] for i in screened], bases, global_flat), params_mask(parts))
    drops = bulyan_selection(dist, defense.f) if defense.name == "bulyan" else \
        multi_krum(dist, defense.f, 1 if defense.name == "krum" else defense.keep, defense.name)
    return {screened[j]: why for j, why in drops.items()}


def zeno_reference(defense, version: int, global_flat: torch.Tensor, memory) -> torch.Tensor:
    """Zeno++'s v: the cached one while it is fewer than ``defense.refresh`` versions old, else ∇ℓ(w_t) from the
    server-held set, cached as ``{"v": v, "version": t}`` (a new mapping: a snapshot's reference stays valid)."""
    server = getattr(memory, "server", None)
    if server is None:
        raise ValueError("zenopp needs the server-held set (algorithm.defense.server_samples), which the runtime "
                         "hands in as the rule memory's server (runtime/server_data.py)")
    state = memory.defense_state
    if "v" in state and version - state["version"] < defense.refresh:
        return state["v"]
    v = server.gradient(version, global_flat)
    memory.defense_state = MappingProxyType({"v": v, "version": version})
    return v


def estimator_rule(cfg, memory=None) -> Optional[Callable]:
    """The rule an estimator puts in FedBuff's place (centered clipping's with a ``state``; FLTrust's with
    ``memory.server``, the server-held set's computations), or None."""
    defense = getattr(cfg, "defense", None)
    if defense is None or defense.kind != "estimator":
        return None
    if defense.name == "fltrust":
        return partial(estimate_trusted, server=getattr(memory, "server", None))
    return estimate_around_centre if DEFENSES[defense.name].stateful else estimate


@torch.no_grad()
def estimate(cfg, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
             base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None) -> AggregationResult:
    """w_t + η_g · est({c_k Δ_k}) for the median, the trimmed mean and Bulyan's coordinate phase."""
    return _estimate(cfg, version, global_flat, updates, base_model, parts, None)


@torch.no_grad()
def estimate_around_centre(cfg, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
                           base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None,
                           state=None) -> AggregationResult:
    """Centered clipping's step, its centre taken from ``state`` and the new one returned in the result's."""
    return _estimate(cfg, version, global_flat, updates, base_model, parts, {} if state is None else state)


@torch.no_grad()
def estimate_trusted(cfg, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
                     base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None, *,
                     server=None) -> AggregationResult:
    """FLTrust's step around the server's update g_0 = ``server.update(version, w_t)``."""
    if server is None:
        raise ValueError("fltrust needs the server-held set (algorithm.defense.server_samples), which the runtime "
                         "hands in as the rule memory's server (runtime/server_data.py)")
    return _estimate(cfg, version, global_flat, updates, base_model, parts, None, server=server)


def _estimate(cfg, version, global_flat, updates, base_model, parts, state, server=None) -> AggregationResult:
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    if not accepted:
        return AggregationResult(global_flat.clone(), info, state=None if state is None else dict(state))
    d = cfg.defense
    n = len(accepted)
    if d.name == "bulyan" and n < 2 * d.f + 1:
        raise ValueError(f"bulyan's coordinate phase on {n} updates with f={d.f}: it averages n − 2f of them (its "
                         f"selection, which needs 4f + 3, comes first)")
    scale = [fedbuff_scale(info[i]["staleness"], cfg.staleness_scaling) for i in accepted]
    for i, c in zip(accepted, scale):
        info[i]["weight"] = cfg.server_lr * c / n
    deltas = Deltas([updates[i] for i in accepted], BaseModels(base_model, global_flat), global_flat, scale)
    counters = parts.counters.to(global_flat.device)
    new_state = None
    if d.name == "fltrust":
        est, coef, trust = fltrust(deltas, server.update(version, global_flat), params_mask(parts))
        est[counters] = 0.0
        for i, c, ts, k in zip(accepted, coef, trust, range(n)):
            info[i]["weight"] = cfg.server_lr * c * scale[k]  # the coefficient of Δ_k itself (x_k = c_k Δ_k)
            info[i]["trust"] = ts
    elif d.name == "centered_clipping":
        est = centered_clipping(deltas, state.get("centre"), d.tau, d.iterations, params_mask(parts))
        est[counters] = 0.0
        new_state = {**state, "centre": est}
    else:
        est = coordinatewise(deltas, d.name, beta=d.beta, f=d.f)
    out = (global_flat.to(torch.float64) + cfg.server_lr * est).to(global_flat.dtype)
    return AggregationResult(carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts), info,
                             state=new_state)
