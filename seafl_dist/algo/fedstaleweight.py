"""FedStaleWeight (Ma, Tu, Chen and Janapa Reddi, arXiv 2406.02877) as its authors' test bench computes it
(18jeffreyma/afl-bench, afl_bench/experiments/expected_staleness.py, strategy "ExpectedStaleness"): a rule with
memory (:mod:`.memory`) whose state is each device's observed staleness.

With t the current version, S_k = t − t_k, i(k) the device of update k and c = ``algorithm.fedstaleweight.offset``,
for the accepted updates of the buffer:

    first, every accepted update is counted:  n_i ← n_i + 1,  Σ_i ← Σ_i + S_k      (k of device i)
    s̄_i = Σ_i / n_i                                        (device i's average observed staleness)
    p_k = (s̄_{i(k)} + c) / Σ_{j ∈ B} (s̄_{i(j)} + c)       (0 for every k when that sum is 0)
    w_{t+1} = w_t + Σ_k p_k Δ_k,    Δ_k = w_k − w_{t_k}

c = 0 is the bench's weight, s̄ · K/N before the normalisation (K/N cancels in it); c = 1, the default, is the
average of S + 1. Choices (docs/algorithms.md, "FedStaleWeight"):
- Which updates count toward s̄_i: the accepted ones, the update being aggregated included, counted before any weight
  is computed (as the bench's ``track_update`` runs over the whole buffer first). A device twice in one buffer is
  counted twice, and both its updates get the same weight. A rejected update (non-finite, wrong size; the guard's
  never reach the rule) takes no part: its device's count and sum stay as they were.
- s̄_i averages every accepted update of the device since the run began (the paper's "average staleness"). The
  bench keeps at most 5 per device and, when full, drops the newest (``list.pop()``), not the oldest its comment
  names: not reproduced.
- With c = 0, a device whose updates were all fresh gets weight 0, and a sum of 0 (every update of the buffer from
  such devices, as at the run's first aggregation) gives every weight 0 and w_{t+1} = w_t, as the bench's
  ``weight_total > 0 else 0``. With c > 0 the sum is positive whenever an update is accepted.
- Every entry but the integer counters takes the step (the bench skips parameters named ``bn``; batch norm's
  statistics are not among its parameters at all); counters as in every rule (:func:`.common.carry_counters`).

State: ``{"devices": {i: tensor([n_i, Σ_i], int64)}}``, only the devices whose updates were accepted, 16 bytes each.
A new state shares every entry but those of this buffer's devices, each a new tensor; none is written in place.
An aggregation whose every update was rejected returns the state it got (its entries unchanged).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import BaseModels, as_global, carry_counters, flat_parts, screen
from .types import AggregationResult, BufferedUpdate, FlatParts


def counted(devices: Mapping, observed: list[tuple[int, int]]) -> dict:
    """The new per-device entries: ``devices`` (shared) with each (device, staleness) of ``observed`` counted, the
    entries of those devices replaced by new tensors."""
    out = dict(devices)
    for device, staleness in observed:
        n, total = (int(v) for v in out[device].tolist()) if device in out else (0, 0)
        out[device] = torch.tensor([n + 1, total + staleness], dtype=torch.int64)
    return out


def average(entry: torch.Tensor) -> float:
    """s̄_i = Σ_i / n_i of one device's entry."""
    n, total = entry.tolist()
    return total / n


@torch.no_grad()
def fedstaleweight(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
                   base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None, *,
                   state: Mapping) -> AggregationResult:
    """Each accepted delta weighted by its device's average staleness (this update counted), normalised."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    for entry in info:
        entry["avg_staleness"] = None
    devices = counted(state.get("devices", {}), [(updates[i].device, info[i]["staleness"]) for i in accepted])
    new_state = {"devices": devices}
    out = global_flat.clone()
    if not accepted:
        return AggregationResult(out, info, state=new_state)
    averages = {i: average(devices[updates[i].device]) for i in accepted}
    raw = {i: averages[i] + cfg.fedstaleweight.offset for i in accepted}
    norm = sum(raw.values())
    for i in accepted:
        info[i]["avg_staleness"] = averages[i]
    if not norm > 0:
        return AggregationResult(out, info, state=new_state)
    bases = BaseModels(base_model, global_flat)
    for i in accepted:
        p = raw[i] / norm
        info[i]["weight"] = p
        if p:
            out.add_(as_global(updates[i].flat, global_flat) - bases(updates[i].base_version), alpha=p)
    return AggregationResult(carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts), info,
                             state=new_state)
