"""The two records the aggregation rules exchange with the server loop."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True, eq=False)
class BufferedUpdate:
    """One finished job waiting in the server's buffer.

    ``eq=False``: comparing two updates field by field would compare tensors, which has
    no single truth value; updates compare (and hash) by identity instead.
    """

    device: int
    job: int
    flat: torch.Tensor  # the trained local model w_k, flat (params + buffers), float32
    n_samples: int  # n_k = |D_k|
    base_version: int  # t_k, the global version the job started from
    epochs: int  # epochs actually trained (fewer than E under SEAFL² partial training)


@dataclass
class AggregationResult:
    """What one aggregation produced.

    ``new_global`` is w_{t+1}, always a fresh tensor (inputs are never mutated).
    ``info`` holds one dict per input update, in input order, with at least
    ``weight`` (the final normalised weight the rule gave the update; 0.0 if rejected),
    ``rejected`` (bool), ``reason`` (None, or why it was rejected) and ``staleness``
    (S_k = t − t_k). SEAFL adds ``gamma``, ``s`` and ``cos`` (None when rejected);
    FedAsync adds ``a`` (its mixing coefficient α_mix · f(S_k)).
    """

    new_global: torch.Tensor
    info: list[dict] = field(default_factory=list)
