"""Port (Su and Li, "How Asynchronous can Federated Learning Be?", IWQoS 2022) as PLATO computes it
(TL-System/plato, examples/async/port/port_server.py): a rule with memory (:mod:`.memory`).

With t the current version, L = ``algorithm.port.lag`` and b = ``algorithm.port.b``, for each accepted update k:

    Δ_k = w_k − w_t                                   (against the current model, as PLATO's deltas)
    c_k = cos(Δ_k, w_t − w_{t−L})   if S_k > 1 and w_{t−L} is known,   else 1
    r_k = (n_k / Σ_B n) · ((c_k + 1)/2 + b/(S_k + b))
    p_k = r_k / Σ_B r
    w_{t+1} = w_t + Σ_k p_k Δ_k                         (= Σ_k p_k w_k)

Choices, each checked against port_server.py (docs/algorithms.md, "Port"):
- L = 1 is PLATO's: at its round r the current model is round r − 1's, and it reads model_{r−2}.pth, the model one
  aggregation older (its file name reads as t − 2; ``lag: 2`` gives that reading).
- The cosine runs over the trainable parameters (``parts.params``), in float64; PLATO's runs over the whole
  state_dict, batch norm's statistics and integer counters included. The cosine with a zero vector is 0 (torch's
  ``F.cosine_similarity`` gives 0 too, through its ε).
- w_{t−L} is not known before L aggregations, nor after a resume from a checkpoint written before them: c_k = 1 then,
  as PLATO's ``similarity = 1.0`` when model_{r−2}.pth does not exist.
- Σ_B n and the normalisation run over the accepted updates; with Σ n = 0 every weight is 0 and w_{t+1} = w_t.
  Counters are carried as in every rule (:func:`.common.carry_counters`).

State: ``{"models": {v: w_v}}``, the last L global models the rule was called with (itself included), by version.
It is pushed at every call, also when every update was rejected, so the movement is always the server's own. The
tensors are the server's w_t themselves, never copied nor written: L·d·4 bytes, shared with the server's versions.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import as_global, carry_counters, cosine, flat_parts, masked, screen
from .types import AggregationResult, BufferedUpdate, FlatParts


def port_weight(n_share: float, cos: float, staleness: int, b: float) -> float:
    """r_k before normalisation: n_k/Σn · ((cos + 1)/2 + b/(S + b))."""
    return n_share * ((cos + 1.0) / 2.0 + b / (staleness + b))


def remembered(state: Mapping, version: int, global_flat: torch.Tensor, lag: int) -> dict:
    """The new state: the models of versions t − L + 1 … t (w_t = ``global_flat`` added, older ones dropped)."""
    models = {v: w for v, w in state.get("models", {}).items() if version - lag < v < version}
    models[version] = global_flat
    return {"models": models}


@torch.no_grad()
def port(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
         base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None, *,
         state: Mapping) -> AggregationResult:
    """Port's weights over the accepted updates, their deltas against w_t; the state keeps the last L models."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    own = cfg.port
    new_state = remembered(state, version, global_flat, own.lag)
    for entry in info:
        entry["cos"] = None
    previous = state.get("models", {}).get(version - own.lag)
    total = sum(updates[i].n_samples for i in accepted)
    if not accepted or total <= 0:
        return AggregationResult(global_flat.clone(), info, state=new_state)
    mask = None if bool(parts.params.all()) else parts.params
    movement = None if previous is None else masked(global_flat - as_global(previous, global_flat), mask)
    deltas, raw = [], []
    for i in accepted:
        delta = as_global(updates[i].flat, global_flat) - global_flat
        S = info[i]["staleness"]
        c = cosine(masked(delta, mask), movement) if S > 1 and movement is not None else 1.0
        info[i]["cos"] = c
        deltas.append(delta)
        raw.append(port_weight(updates[i].n_samples / total, c, S, own.b))
    norm = sum(raw)
    if not norm > 0:
        return AggregationResult(global_flat.clone(), info, state=new_state)
    out = global_flat.clone()
    for i, delta, r in zip(accepted, deltas, raw):
        info[i]["weight"] = r / norm
        out.add_(delta, alpha=r / norm)
    return AggregationResult(carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts), info,
                             state=new_state)
