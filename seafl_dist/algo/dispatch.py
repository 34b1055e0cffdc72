"""``aggregate``: run the rule that ``cfg.rule`` names (SEAFL² uses SEAFL's), or a user's rule named by
import path (``algorithm.name: myrules:median``, its ``algorithm.params`` as keyword arguments;
:mod:`seafl_dist.settings.plugins`), whose result is checked."""
from __future__ import annotations

import inspect
from typing import Callable, Optional

import torch

from ..settings import AlgorithmConfig, ConfigError
from ..settings.plugins import is_import_path, plugin_error, resolve
from .. import defenses  # its names are read at call time: defenses/ imports algo/ too (either may come first)
from .common import BaseModels, staleness_of
from .asyncsgd import asyncsgd
from .ca2fl import ca2fl
from .fedasync import fedasync
from .fedavg import fedavg
from .fedbuff import fedbuff
from .fedcompass import fedcompass
from .fedstaleweight import fedstaleweight
from .guard import NormHistory, rejections, update_norms
from .memory import RuleMemory, is_stateful
from .port import port
from .scaffold import scaffold
from .seafl import seafl
from .types import AggregationResult, BufferedUpdate, FlatParts

RULES = {"seafl": seafl, "fedbuff": fedbuff, "fedasync": fedasync, "fedavg": fedavg, "ca2fl": ca2fl,
         "asyncsgd": asyncsgd, "port": port,
         "fedstaleweight": fedstaleweight, "fedcompass": fedcompass, "scaffold": scaffold}


def aggregate(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor,
              updates: list[BufferedUpdate], base_model: Callable[[int], torch.Tensor],
              parts: Optional[FlatParts] = None, history: Optional[NormHistory] = None,
              memory: Optional[RuleMemory] = None) -> AggregationResult:
    """Aggregate a buffer into w_{t+1}.

    ``version`` is the current t (before the bump): S_k = t − t_k. ``base_model(v)``
    returns the flat global model w_v, called at most once per version. Bad updates (wrong size,
    non-finite) are rejected with weight 0 and a reason, and the rest aggregated as if they were
    absent; with none left, w_{t+1} = w_t (a copy). Inputs are never mutated. ``parts`` says which
    entries are trainable parameters, float statistics and integer counters (from the model's
    layout); None means all are parameters.

    With ``cfg.defense`` on (seafl_dist/defenses/), a filter's drops join the guard's, and an estimator replaces
    FedBuff's rule.

    With ``history`` (the server's :class:`~.guard.NormHistory`, updated here) or the update guard on
    (``cfg.update_norm_factor``), each update's norm is measured (``result.norms``) and the guard's
    rejections (:mod:`.guard`) are made before the rule runs: the rule sees only the updates kept.
    Without either, ``base_model`` is called only by rules that need Δ_k or w_t − w_{t_k}.

    ``memory`` (:class:`~.memory.RuleMemory`) holds a stateful rule's state: handed in, replaced by the rule's new
    one. A stateful rule is called even when the guard kept no update; None: a fresh memory (a first aggregation).
    """
    memory = memory if memory is not None else memory_of(cfg)
    factor = getattr(cfg, "update_norm_factor", None)
    defense = getattr(cfg, "defense", None)
    defended = defense is not None and defense.on
    if history is None and factor is None and not defended:
        return _rule(cfg, version, global_flat, updates, base_model, parts, memory)
    history = history if history is not None else NormHistory()
    bases = BaseModels(base_model, global_flat)  # the norms and the rule share one fetch per version
    norms = update_norms(global_flat, updates, bases, parts)
    refused = rejections(factor, norms, history)
    if defended:  # a filter's drops, among what the guard kept (seafl_dist/defenses/)
        refused.update(defenses.rejections(defense, updates, bases, global_flat, parts, refused, norms, version,
                                           memory))
    kept = [u for i, u in enumerate(updates) if i not in refused]
    result = _rule(cfg, version, global_flat, kept, bases, parts, memory) if kept or memory.stateful else \
        AggregationResult(global_flat.clone(), [])
    info = _merged(result.info, refused, [staleness_of(version, u) for u in updates])
    history.norms.extend(n for n, d in zip(norms, info) if n is not None and not d["rejected"])
    return AggregationResult(result.new_global, info, norms, result.state)


def _merged(kept_info: list[dict], refused: dict[int, str], staleness: list[int]) -> list[dict]:
    """The rule's info for the kept updates, with the guard's rejections back in their places (the
    rule's own keys present, as None, as the rule reports its own rejections)."""
    extra = dict.fromkeys(k for d in kept_info for k in d if k not in ("weight", "rejected", "reason", "staleness"))
    kept, out = iter(kept_info), []
    for i, s in enumerate(staleness):
        out.append({"weight": 0.0, "rejected": True, "reason": refused[i], "staleness": s, **extra}
                   if i in refused else next(kept))
    return out


def memory_of(cfg: AlgorithmConfig) -> RuleMemory:
    """The server's holder (:class:`~.memory.RuleMemory`) of the state of the rule ``cfg.rule`` names, built in or by
    import path: stateful when the rule declares ``state``. Here, not in memory.py, which the rules import."""
    return RuleMemory(cfg.rule, is_stateful(defenses.estimator_rule(cfg) or rule_of(cfg)))


def rule_of(cfg: AlgorithmConfig) -> Callable:
    """The function ``cfg.rule`` names: a built-in one, or a user's by import path."""
    if is_import_path(cfg.rule):
        return resolve("algorithm.name", cfg.rule)
    try:
        return RULES[cfg.rule]
    except KeyError:
        raise ValueError(f"unknown algorithm {cfg.name!r}; allowed: {', '.join(sorted(RULES))}") from None


def _rule(cfg: AlgorithmConfig, version: int, global_flat: torch.Tensor, updates: list[BufferedUpdate],
          base_model: Callable[[int], torch.Tensor], parts: Optional[FlatParts], memory: RuleMemory
          ) -> AggregationResult:
    """The rule ``cfg.rule`` names, built in or by import path (its result checked), on ``updates``; a stateful
    one with ``memory``'s state."""
    rule = defenses.estimator_rule(cfg, memory) or rule_of(cfg)  # an estimator replaces FedBuff's mean (seafl_dist/defenses/)
    if is_import_path(cfg.rule):
        extra = {"parts": parts} if "parts" in inspect.signature(rule).parameters else {}  # optional, as for the built-ins
        own = getattr(cfg, "params", None) or {}  # algorithm.params: the rule's own keyword arguments
        result = memory.call(rule, cfg, version, global_flat, list(updates), base_model, **extra, **own)
        return checked(cfg.rule, result, global_flat, updates, version)
    return memory.call(rule, cfg, version, global_flat, list(updates), base_model, parts)


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
    return AggregationResult(new.to(global_flat.dtype), info, state=result.state)


def try_rule(cfg: AlgorithmConfig, global_flat: torch.Tensor, parts: FlatParts) -> None:
    """Call a user's rule (``cfg.rule`` an import path) as a run's first aggregation calls it, and check its
    result as the run does (``--dry-run``, runtime/dryrun.py): at version 0, on a buffer of two updates that
    started from w_0 = ``global_flat``, each w_0 plus a small seeded delta (counters one step on), 10 and 20
    samples. Its failure is one ConfigError line naming ``algorithm.name``; torch's generator does not move."""
    if not is_import_path(cfg.rule):
        return
    g = torch.Generator().manual_seed(0)
    steps = parts.counters.to(global_flat.dtype)
    updates = [BufferedUpdate(device=k, job=k, base_version=0, n_samples=10 * (k + 1), epochs=1,
                              flat=global_flat + 1e-3 * torch.randn(global_flat.shape, generator=g)
                              * (~parts.counters) + steps)
               for k in range(2)]
    try:
        aggregate(cfg, 0, global_flat, updates, lambda v: global_flat, parts)
    except ConfigError:
        raise
    except Exception as err:  # the user's rule raised
        text = " ".join(str(err).split()) or "(no message)"
        raise plugin_error("algorithm.name", cfg.rule, f"it raised {type(err).__name__}: {text}, on a dry run's "
                                                       f"buffer of 2 updates from version 0 of the model's "
                                                       f"{global_flat.numel()} entries") from None
