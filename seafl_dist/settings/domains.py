"""What values a key takes (its domain), declared in the same line as its default and help.

    lr: float = key(0.01, "local SGD learning rate", "(0, inf)")                 # a finite number > 0
    dropout: Optional[float] = key(None, "...; `null`: none", "[0, 1)")          # or null
    max_time: Optional[float] = key(None, "...; `null`: no limit", "(0, inf]")   # .inf allowed: read as null
    staleness_fn: str = key("polynomial", "...", ("constant", "polynomial", "hinge"))
    name: str = key("lenet5", "...", plugin_or(("lenet5", "resnet18", "vgg16")))  # or pkg.module:callable
    targets: list = key([0.5, 0.9], "...", list_of("(0, 1]"))

The type is the field's annotation (``int``, ``float``, ``str``, ``bool``, ``list``, ``Optional[...]``
adds null). A number's domain is an interval: finite everywhere, NaN and -inf refused everywhere, +inf
only where the interval is closed at ``inf]`` ("no limit"; the key must then be Optional and reads
+inf as null). A string without declared choices must be non-empty. Sections check their keys with
:func:`check_fields` (first thing in ``__post_init__``), core.py coerces types with :func:`describe`'s
wording, and the reference (docs/configuration.md) prints :func:`describe` too: one declaration each.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any

from seafl_dist.settings import plugins
from seafl_dist.settings.errors import _fail

SEEDS = "[0, 4294967295]"  # a seed key's domain: numpy's legacy seeding (RandomState: the digits' split, data/digits.py) takes seeds below 2**32


@dataclass(frozen=True)
class Interval:
    """Numbers from ``low`` to ``high`` (either may be infinite); ``*_open`` leaves that end out."""

    low: float
    high: float
    low_open: bool
    high_open: bool

    @property
    def no_limit(self) -> bool:
        """+inf is allowed, meaning "no limit" (read as null)."""
        return math.isinf(self.high) and not self.high_open

    def contains(self, v: float) -> bool:
        if math.isnan(v) or (math.isinf(v) and not (v > 0 and self.no_limit)):
            return False
        above = v > self.low if self.low_open else v >= self.low
        below = v < self.high if self.high_open else v <= self.high
        return above and below


@dataclass(frozen=True)
class OneOf:
    """One of ``choices`` (strings); with ``plugin``, also an import path ``pkg.module:callable``; with ``prefix``,
    also any value that starts with it (``hf:<path>``: what follows is checked by what reads it)."""

    choices: tuple
    plugin: bool = False
    prefix: str = ""


@dataclass(frozen=True)
class Text:
    """Any non-empty string (a path, a name)."""


@dataclass(frozen=True)
class ListOf:
    """A list whose every item is in ``item``; ``empty``: the empty list is allowed."""

    item: Any
    empty: bool = True


def interval(text: str) -> Interval:
    """``"(0, 1]"``, ``"[1, inf)"``, ``"(0, inf]"`` → an :class:`Interval` (``inf`` as a bound)."""
    lo, hi = text.strip()[1:-1].split(",")
    return Interval(float(lo), float(hi), text.strip()[0] == "(", text.strip()[-1] == ")")


def plugin_or(choices: tuple) -> OneOf:
    return OneOf(tuple(choices), plugin=True)


def list_of(item) -> ListOf:
    return ListOf(as_domain(item))


def as_domain(spec) -> Any:
    """The domain a ``key(..., spec)`` declares: an interval's text, a tuple of choices, or a domain."""
    if isinstance(spec, str):
        return interval(spec)
    if isinstance(spec, tuple):
        return OneOf(spec)
    return spec


def domain_of(f: dataclasses.Field, tp: Any) -> Any:
    """A field's declared domain; a string key without one is :class:`Text`, a bool needs none (None)."""
    declared = f.metadata.get("domain")
    if declared is not None:
        return declared
    return Text() if base_type(tp) is str else None


def base_type(tp: Any) -> Any:
    """``Optional[int]`` → ``int``; ``list[float]`` → ``list``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if type(None) in typing.get_args(tp):
        return base_type(args[0])
    return typing.get_origin(tp) or tp


def optional(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


# ---- wording -------------------------------------------------------------------------------

def _num(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:g}" if abs(x) < 1e6 else str(int(x))


def describe(domain: Any, tp: Any) -> str:
    """What a key allows, in the words every error and the reference use."""
    kind, tail = base_type(tp), ", or null" if optional(tp) else ""
    if isinstance(domain, Interval):
        noun = "an integer" if kind is int else "a number" if domain.no_limit or math.isfinite(domain.high) \
            else "a finite number"
        if domain.no_limit:
            tail = ", or null or .inf (no limit)"
        if math.isinf(domain.high) and math.isinf(domain.low):
            return noun + tail
        if math.isinf(domain.high):
            return f"{noun} {'>' if domain.low_open else '>='} {_num(domain.low)}{tail}"
        brackets = ("(" if domain.low_open else "[", ")" if domain.high_open else "]")
        return f"{noun} in {brackets[0]}{_num(domain.low)}, {_num(domain.high)}{brackets[1]}{tail}"
    if isinstance(domain, OneOf):
        text = "one of " + ", ".join(map(str, domain.choices))
        text += f", or {domain.prefix}<name>" if domain.prefix else ""
        return text + (", or package.module:callable" if domain.plugin else "") + tail
    if isinstance(domain, ListOf):
        item = describe(domain.item, float if isinstance(domain.item, Interval) else str)
        return f"a list, each item {item}" + ("" if domain.empty else " (at least one)") + tail
    if isinstance(domain, Text):
        return "a non-empty string" + tail
    if kind is dict:
        return "a mapping" + tail
    return ("true or false" if kind is bool else f"a {getattr(kind, '__name__', kind)}") + tail


# ---- checking ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def check_fields(obj: Any, prefix: str) -> None:
    """Refuse any key of the section ``obj`` (named ``prefix``) whose value is outside its domain."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            continue
        check_value(f"{prefix}.{f.name}" if prefix else f.name, getattr(obj, f.name), domain_of(f, tp), tp)


def check_value(key: str, value: Any, domain: Any, tp: Any) -> None:
    if value is None:
        if not optional(tp):
            _fail(key, value, describe(domain, tp))
        return
    kind = base_type(tp)
    if kind is bool:
        if not isinstance(value, bool):
            _fail(key, value, describe(domain, tp))
        return
    if kind is dict:  # a mapping handed on as it is (what reads it checks its entries, in its own words)
        if not isinstance(value, dict):
            _fail(key, value, describe(domain, tp))
        return
    if isinstance(domain, ListOf):
        if not isinstance(value, list) or (not value and not domain.empty):
            _fail(key, value, describe(domain, tp))
        item_tp = float if isinstance(domain.item, Interval) else str
        for item in value:
            if not _in(item, domain.item, item_tp, key):
                _fail(key, value, describe(domain, tp))
        return
    if not _in(value, domain, kind, key):
        _fail(key, value, describe(domain, tp))


def _in(value: Any, domain: Any, kind: Any, key: str) -> bool:
    """Whether one value is of ``kind`` and inside ``domain`` (an import path is resolved here)."""
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if kind is int and not isinstance(value, int):
            return False
        return domain is None or domain.contains(value)
    if not isinstance(value, str) or value == "":
        return False
    if isinstance(domain, OneOf) and domain.prefix and value.startswith(domain.prefix) and value != domain.prefix:
        return True
    if isinstance(domain, OneOf) and domain.plugin:
        plugins.check(key, value, domain.choices)  # its own one line: what is wrong with an import path
        return True
    return value in domain.choices if isinstance(domain, OneOf) else True
