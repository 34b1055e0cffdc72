"""``aggregate``: run the rule that ``cfg.rule`` names (SEAFL² uses SEAFL's), or a user's rule named by
import path (``algorithm.name: myrules:median``; :mod:`seafl_dist.settings.plugins`), whose result is checked."""
from __future__ import annotations

import inspect

from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig
from ..settings.plugins import is_import_path, plugin_error, resolve
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
    if is_import_path(cfg.rule):
        rule = resolve("algorithm.name", cfg.rule)
        extra = {"parts": parts} if "parts" in inspect.signature(rule).parameters else {}  # optional, as for the built-ins
        result = rule(cfg, version, global_flat, list(updates), base_model, **extra)
        return checked(cfg.rule, result, global_flat, updates, version)
    try:
        rule = RULES[cfg.rule]
    except KeyError:
        raise ValueError(f"unknown algorithm {cfg.name!r}; allowed: {', '.join(sorted(RULES))}") from None
    return rule(cfg, version, global_flat, list(updates), base_model, parts)


def checked(path: str, result, global_flat: torch.Tensor, updates: list[BufferedUpdate],
            version: int) -> AggregationResult:
    """A user rule's result, refused (one line naming ``algorithm.name``) unless it is an
    AggregationResult with a finite w_{t+1} of w_t's size and one info dict (with a numeric
    ``weight``) per update. ``rejected``, ``reason`` and ``staleness`` are filled in where missing."""
    if not isinstance(result, AggregationResult):
        raise plugin_error("algorithm.name", path, f"it returned {type(result).__name__}")
    new = result.new_global
    if not isinstance(new, torch.Tensor) or new.dim() != 1 or new.numel() != global_flat.numel() \
            or not new.is_floating_point():
        got = f"{new.dtype} {tuple(new.shape)}" if isinstance(new, torch.Tensor) else type(new).__name__
        raise plugin_error("algorithm.name", path, f"its new_global is {got}, not a 1-D float tensor of "
                                                   f"{global_flat.numel()} entries like w_t")
    if not bool(torch.isfinite(new).all()):
        raise plugin_error("algorithm.name", path, f"its new_global at version {version + 1} holds NaN or inf")
    info = result.info
    if not isinstance(info, list) or len(info) != len(updates):
        raise plugin_error("algorithm.name", path, f"its info is not a list of {len(updates)} dicts, one per update")
    for i, (d, u) in enumerate(zip(info, updates)):
        if not isinstance(d, dict) or isinstance(d.get("weight"), bool) or not isinstance(d.get("weight"), (int, float)):
            raise plugin_error("algorithm.name", path, f"its info[{i}] has no numeric 'weight'")
        d.setdefault("rejected", False)
        d.setdefault("reason", None)
        d.setdefault("staleness", version - u.base_version)
    return AggregationResult(new.to(global_flat.dtype), info)
