"""``aggregate``: run the rule that ``cfg.rule`` names (SEAFL² uses SEAFL's)."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..config import AlgorithmConfig
from .fedasync import fedasync
from .fedavg import fedavg
from .fedbuff import fedbuff
from .seafl import seafl
from .types import AggregationResult, BufferedUpdate, FlatParts

RULES = {"seafl": seafl, "fedbuff": fedbuff, "fedasync": fedasync, "fedavg": fedavg}


def aggregate(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
              updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
              parts: Optional[FlatParts] = None) -> AggregationResult:
    """Aggregate a buffer into w_{t+1}.

    ``version`` is the current t (before the bump): S_k = t − t_k. ``base_model(v)``
    returns the flat global model w_v; it is called only by rules that need Δ_k or
    w_t − w_{t_k}, at most once per version. Bad updates (wrong size, non-finite) are
    rejected with weight 0 and a reason, and the rest aggregated as if they were absent;
    with none left, w_{t+1} = w_t (a copy). Inputs are never mutated. ``parts`` says which
    entries are trainable parameters, float statistics and integer counters (from the model's
    layout); None means all are parameters.
    """
    try:
        rule = RULES[cfg.rule]
    except KeyError:
        raise ValueError(f"unknown algorithm {cfg.name!r}; allowed: {', '.join(sorted(RULES))}") from None
    return rule(cfg, version, global_flat, list(updates), base_model, parts)
