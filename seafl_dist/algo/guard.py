"""Update norms, and the guard that rejects an update far larger than its peers' (``algorithm.update_norm_factor``).

An update's norm is ‖w_k − w_{t_k}‖₂ over the trainable parameters (batch norm's statistics and
integer counters excluded), summed in float64. One local job that blew up (a large step on a tiny
shard) has a norm orders of magnitude above the others; averaged in, it can wreck the global model
in one aggregation while every entry is still finite, so :func:`~.common.screen` lets it through.

With ``update_norm_factor = f`` (> 1; null: off) an update is rejected when its norm exceeds f times
the reference: the median of the norms of the buffer's updates that pass the value check, or,
when the buffer holds fewer than :data:`PEERS` of them (FedAsync's buffer of one), the median of the
last :data:`HISTORY` accepted norms (the server keeps them, in its checkpoints too). With neither
(the run's first few updates) there is nothing to compare with, and the update is accepted.
The guard runs before any rule, a user's own included: the rule sees only the updates it kept.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Callable, Optional

import torch

from .common import as_global, check_update
from .types import BufferedUpdate, FlatParts

HISTORY = 20  # accepted norms remembered for buffers too small to be their own reference
PEERS = 3  # the fewest norms whose median is a reference (one or two are the suspects themselves)
_CHUNK = 1 << 20  # entries per float64 chunk: bounds the extra memory on a large model


class NormHistory:
    """The last :data:`HISTORY` accepted update norms, oldest first (a list in checkpoints)."""

    def __init__(self, norms=()):
        self.norms: deque = deque((float(n) for n in norms), maxlen=HISTORY)

    def reference(self) -> Optional[float]:
        return statistics.median(self.norms) if len(self.norms) >= PEERS else None

    def to_list(self) -> list[float]:
        return list(self.norms)


@torch.no_grad()
def update_norm(flat: torch.Tensor, base: torch.Tensor, params: Optional[torch.Tensor]) -> float:
    """‖flat − base‖₂ over the entries ``params`` marks (None: all), in float64, chunk by chunk."""
    total = torch.zeros((), dtype=torch.float64, device=base.device)
    for i in range(0, base.numel(), _CHUNK):
        d = flat[i:i + _CHUNK].to(base.device, torch.float64) - base[i:i + _CHUNK].to(torch.float64)
        if params is not None:
            d = d[params[i:i + _CHUNK].to(base.device)]
        total += torch.dot(d, d)
    return math.sqrt(float(total))


def update_norms(global_flat: torch.Tensor, updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
                 parts: Optional[FlatParts]) -> list[Optional[float]]:
    """Each update's norm; None for one the value check rejects (it never counts as a peer)."""
    params = None if parts is None or bool(parts.params.all()) else parts.params
    bases: dict[int, torch.Tensor] = {}
    out = []
    for u in updates:
        if check_update(u.flat, global_flat.numel()) is not None:
            out.append(None)
            continue
        if u.base_version not in bases:
            bases[u.base_version] = as_global(base_model(u.base_version).reshape(-1), global_flat)
        out.append(update_norm(u.flat, bases[u.base_version], params))
    return out


def reference(norms: list[Optional[float]], history: NormHistory) -> tuple[Optional[float], str]:
    """(the median the guard compares with, where it comes from)."""
    peers = [n for n in norms if n is not None]
    if len(peers) >= PEERS:
        return statistics.median(peers), "the buffer's"
    return history.reference(), f"the last {len(history.norms)} accepted"


def rejections(factor: Optional[float], norms: list[Optional[float]], history: NormHistory) -> dict[int, str]:
    """{index: reason} of the updates the guard rejects (none when ``factor`` is None)."""
    if factor is None:
        return {}
    ref, source = reference(norms, history)
    if ref is None:
        return {}
    return {i: f"update norm {n:.4g} > {factor:g} × {source} median norm {ref:.4g}"
            for i, n in enumerate(norms) if n is not None and n > factor * ref}
