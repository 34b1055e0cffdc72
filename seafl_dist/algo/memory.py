"""Rules with memory: the contract of a rule's state between aggregations, and the server's holder of it.

This module owns what a rule may keep from one aggregation to the next (CA²FL's cache of each device's latest
update, Port's last global models, FedStaleWeight's staleness per device, a user's rule's own), how it is handed
in and back, checked, sized, and written into and read back from a checkpoint. The rules' equations are theirs.

The contract (docs/extending.md, "A rule with memory"):

- A rule is **stateful** when it declares a parameter named ``state``. It is then called with ``state=`` the
  mapping its previous call returned, ``{}`` at the run's first aggregation (and after a resume from a checkpoint
  written before any), and it returns ``AggregationResult(new_global, info, state=new_state)``.
- The state it gets is read-only (a ``MappingProxyType``), and it is never mutated: the new state is a new mapping
  that shares the unchanged entries (a per-device cache shares every tensor but the few the buffer replaced) and
  writes no tensor in place. So a snapshot of the end of an aggregation (runtime/snapshots.py) holds references,
  never copies, and an aggregation costs O(d) per arrival, never O(N·d).
- Its values are tensors, numbers, strings, booleans, None, and mappings (string or integer keys) of the same,
  nested: what ``torch.load(weights_only=True)`` reads back. Anything else stops the run in one line naming
  ``algorithm.name``: at that aggregation for a state that is no mapping with string keys, at the first checkpoint
  that would write it for a value inside (the line says where, ``its state's 'cache'[7] is list``).
- A stateful rule is called at every aggregation, also one whose every update was rejected (the guard's or the
  value check's), with the updates the guard kept, so a rule that keeps the global models it saw (Port) sees each.
- The state lives on rank 0 with the server, goes into every checkpoint (``rule_state``), and a resume hands the
  rule the state of the checkpoint's aggregation: the resumed run has the uninterrupted run's bytes.
- summary.json's ``rule_state`` gives the state's entries and bytes at the run's end (tensors that share storage
  counted once).
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Callable, Optional

import torch

from ..settings.plugins import is_import_path, plugin_error

_LEAVES = (int, float, str, bool, type(None))


def is_stateful(rule: Callable) -> bool:
    """Whether ``rule`` declares a ``state`` parameter (so keeps a state between aggregations)."""
    try:
        return "state" in inspect.signature(rule).parameters
    except (TypeError, ValueError):
        return False


def frozen(state: Optional[Mapping]) -> Mapping:
    """The read-only view a rule gets (``{}`` before its first aggregation); a view already read-only is itself, so a
    rule that hands its state back unchanged keeps the very mapping (no view of a view per aggregation)."""
    if isinstance(state, MappingProxyType):
        return state
    return MappingProxyType({} if state is None else dict(state))


def check_state(name: str, state: Any, where: str = "its state") -> Mapping:
    """``state`` as a rule returned it, checked at the top level: a mapping with string keys (nested values are
    checked when a checkpoint writes them, :func:`to_cpu`). One line naming ``algorithm.name`` otherwise."""
    if not isinstance(state, Mapping):
        raise _refused(name, f"{where} is {type(state).__name__}, not a mapping (a stateful rule returns "
                             f"AggregationResult(new_global, info, state={{...}}))")
    for k in state:
        if not isinstance(k, str):
            raise _refused(name, f"{where} has the key {k!r}: a rule's state has string keys at the top")
    return state


def _refused(name: str, why: str) -> Exception:
    if is_import_path(name):
        return plugin_error("algorithm.name", name, why)
    return ValueError(f"algorithm.name={name}: {why}")  # a built-in's: a bug here, not the user's


def _walk(name: str, value: Any, path: str, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with each tensor replaced by ``fn(tensor)``; refused (naming ``path``) where not a state value."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, _LEAVES):
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise _refused(name, f"its state's {path} has the key {k!r} (keys are strings or integers)")
            out[k] = _walk(name, v, f"{path}[{k!r}]", fn)
        return out
    raise _refused(name, f"its state's {path} is {type(value).__name__}: a state holds tensors, numbers, strings, "
                         f"booleans, None and mappings of them")


def to_cpu(name: str, state: Mapping) -> dict:
    """The state as a checkpoint holds it: plain dicts, tensors detached on the CPU (checked throughout)."""
    return {k: _walk(name, v, repr(k), lambda t: t.detach().cpu()) for k, v in state.items()}


def tensors(state: Mapping):
    """Every tensor in ``state``, nested mappings included."""
    for v in state.values():
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, Mapping):
            yield from tensors(v)


def state_size(state: Optional[Mapping]) -> dict:
    """{"tensors": how many, "bytes": their bytes, storage shared counted once}."""
    seen, total, count = set(), 0, 0
    for t in tensors(state or {}):
        count += 1
        key = (t.untyped_storage().data_ptr(), t.device) if t.numel() else id(t)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes() if t.numel() else 0
    return {"tensors": count, "bytes": total}


class RuleMemory:
    """The rule's state on the server: handed to each aggregation, replaced by what it returns, checkpointed.
    ``algo.dispatch.memory_of(alg)`` makes the one of the rule ``alg.rule`` names."""

    def __init__(self, name: str, stateful: bool):
        self.name, self.stateful = name, stateful
        self.state: Mapping = MappingProxyType({})
        # what a defense computes on the server-held set (FLTrust's g_0), set by the runtime where one is held
        # (runtime/server_data.py); a function of the config and the model, so no state of its own
        self.server = None
        # a defense's own state between aggregations (Zeno++'s cached v and its version; seafl_dist/defenses/), apart
        # from the rule's, read-only and replaced whole, in every checkpoint (``defense_state``; runtime/snapshots.py)
        self.defense_state: Mapping = MappingProxyType({})

    def call(self, rule: Callable, *args, **kwargs):
        """``rule(*args, state=..., **kwargs)`` for a stateful rule (its new state kept), else the plain call."""
        if not self.stateful:
            return rule(*args, **kwargs)
        result = rule(*args, state=self.state, **kwargs)
        new = getattr(result, "state", None)
        self.state = frozen(check_state(self.name, new, "its result's state" if new is not None else
                                        "its result's state (None)"))
        return result

    def of_snapshot(self, state: Mapping) -> dict:
        """What a checkpoint holds (``rule_state``) of a state remembered at the end of an aggregation."""
        return to_cpu(self.name, state)

    def load_state_dict(self, d: Optional[Mapping]) -> None:
        self.state = frozen(d or {})

    def summary(self) -> dict:
        """summary.json's ``rule_state``: the state's size at the run's end (only for a stateful rule)."""
        if not self.stateful:
            return {}
        return {"rule_state": {"keys": sorted(self.state), **state_size(self.state)}}
