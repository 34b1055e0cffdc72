"""CA²FL (Wang et al., ICLR 2024, "Tackling the data heterogeneity in asynchronous federated learning with cached
update calibration", Algorithm 2): a FedBuff-like server step calibrated with each device's cached latest update.

The server keeps h^i, the latest delta of every device that has contributed (h^i = 0 for a device never seen),
and their mean over all N devices, h = (1/N) Σ_{i=1}^N h^i. An aggregation of a buffer B of accepted updates
(K = |B| of them, Δ_k = w_k − w_{t_k} from the job's base) is

    v_t     = h_t + (1/K) Σ_{k∈B} (Δ_k − h_t^{i_k})          (each h_t^{i_k} as it was BEFORE this aggregation)
    w_{t+1} = w_t + η · v_t                                    η = ``algorithm.server_lr`` (the paper's η_g)
    h_{t+1}^i = the last Δ_k of device i in B (buffer order); h_{t+1}^j = h_t^j for every other device

- **The mean's denominator is N**, every device of the run (``cfg.num_devices``, resolved from ``devices.num`` or
  the writers), with never-seen devices at 0, as the paper's h_t = (1/N) Σ_{i∈[N]} h_t^i. It is kept as a running
  float64 sum Σ h^i, moved by (new h^i − old h^i) for the devices the buffer replaces: an aggregation costs O(K·d),
  never O(N·d).
- **A device twice in one buffer**: both updates are calibrated with the same h_t^i (its cache before this
  aggregation), each counts in K, and the cache keeps the later one.
- **A rejected update** (non-finite, wrongly sized, or refused by the update guard before the rule runs) takes no
  part: not in K, and its device's h^i stays as it was. An aggregation with no accepted update returns w_t (a copy)
  and the state unchanged: the paper's server steps only on a buffer of received updates.
- **State** (algo/memory.py): ``{"cache": {device: h^i}, "sum": Σ h^i (float64)}``; never written in place: the
  new cache is a shallow copy sharing every tensor but the buffer's devices'. Size: D·d·4 + d·8 bytes for D
  devices seen and d entries of the flat model (float32 models).
- **Weights** in ``info``: ``weight`` is η/K, the coefficient on Δ_k in w_{t+1} (as FedBuff's); ``cached`` says
  whether the device had an h^i before this aggregation (its calibration term was not 0).
- Integer counters take no step: :func:`.common.carry_counters`, as in every rule.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from .common import BaseModels, as_global, carry_counters, flat_parts, screen
from .types import AggregationResult, BufferedUpdate, FlatParts

F64 = torch.float64


def num_devices(cfg: AlgorithmConfig) -> int:
    """N, the mean's denominator: every device of the run (set when the config and the experiment resolve it)."""
    n = getattr(cfg, "num_devices", None)
    if not isinstance(n, int) or n < 1:
        raise ValueError("algorithm.name=ca2fl: the number of devices N is not known to the rule "
                         "(AlgorithmConfig.num_devices is set from devices.num, or by runtime/setup.py's prepare)")
    return n


@torch.no_grad()
def ca2fl(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
          base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts] = None, *,
          state: Mapping) -> AggregationResult:
    """w_t + η (h_t + (1/K) Σ (Δ_k − h_t^{i_k})), and the cache with the buffer's latest deltas."""
    accepted, info = screen(version, global_flat, updates)
    parts = flat_parts(parts, global_flat)
    cache: Mapping = state.get("cache", {})
    for d, u in zip(info, updates):
        d["cached"] = u.device in cache
    if not accepted:
        return AggregationResult(global_flat.clone(), info, state=state)
    n = num_devices(cfg)
    total = state.get("sum")
    total = torch.zeros(global_flat.numel(), dtype=F64, device=global_flat.device) if total is None else \
        total.to(global_flat.device)  # a resumed state is on the CPU (algo/memory.py to_cpu)
    bases = BaseModels(base_model, global_flat)
    coef = cfg.server_lr / len(accepted)
    last = {updates[i].device: i for i in accepted}  # each device's last update in the buffer: its new h^i
    calibrated = torch.zeros_like(global_flat)  # Σ_B (Δ_k − h_t^{i_k}), in w_t's dtype as FedBuff sums its deltas
    replaced = None  # Σ (Δ_k − h_t^{i_k}) over the updates a later one of their device replaces: not in the new sum
    latest: dict[int, torch.Tensor] = {}
    for i in accepted:
        u = updates[i]
        delta = as_global(u.flat, global_flat) - bases(u.base_version)
        old = cache.get(u.device)
        calibrated.add_(delta)
        if old is not None:
            calibrated.sub_(old.to(global_flat.device))
        if last[u.device] != i:  # a device twice in the buffer: both calibrated with h_t^i, the later one kept
            gone = delta if old is None else delta - old.to(global_flat.device)
            replaced = gone.clone() if replaced is None else replaced.add_(gone)
        latest[u.device] = delta
        info[i]["weight"] = coef
    step = (total * (1.0 / n)).add_(calibrated, alpha=1.0 / len(accepted))  # v_t = h_t + (1/K) Σ (Δ_k − h_t^{i_k})
    out = step.mul_(cfg.server_lr).add_(global_flat).to(global_flat.dtype)  # w_t + η v_t, in float64, rounded once
    new_total = total + (calibrated if replaced is None else calibrated - replaced)  # Σ h_{t+1}^i, a new tensor
    new_cache = {**cache, **latest}  # shares every tensor of the devices the buffer did not replace
    out = carry_counters(out, global_flat, [updates[i].flat for i in accepted], parts)
    return AggregationResult(out, info, state={"cache": new_cache, "sum": new_total})
