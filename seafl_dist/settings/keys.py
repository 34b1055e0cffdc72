"""A config key is a dataclass field that carries its own help and domain, so the reference and the
checks can be generated.

    buffer_size: int = key(10, "K: updates aggregated at once", "[1, inf)")
    idle: IdleConfig = section(IdleConfig, "idle time between epochs")

The help lives in the field's metadata (``help``; ``domain``, the values the key takes (:mod:`.domains`);
optional ``note``, a longer explanation printed under the section's table, and ``shown``, how the
default reads where the value alone would mislead). :mod:`seafl_dist.settings.reference` reads it back
to write docs/configuration.md and ``seafl configs --keys``; a test fails on a field without help.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

from seafl_dist.settings.domains import as_domain


def key(default: Any, help: str, domain: Any = None, *, note: str = "", shown: str = "") -> Any:
    """A field with ``default``, its help and its domain (:mod:`.domains`: an interval such as ``"(0, 1]"``,
    a tuple of choices, or a domain object); a list default is copied for every instance."""
    meta = {"help": help, "note": note, "shown": shown, "domain": None if domain is None else as_domain(domain)}
    if isinstance(default, list):  # dataclasses refuse a mutable default; each config gets its own copy
        return dataclasses.field(default_factory=functools.partial(list, default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: type, help: str) -> Any:
    """A nested section (a dataclass of keys), built with its own defaults."""
    return dataclasses.field(default_factory=cls, metadata={"help": help, "note": "", "shown": ""})


def help_of(f: dataclasses.Field) -> str:
    """The field's one-line help; '' for a field declared without :func:`key` or :func:`section`."""
    return f.metadata.get("help", "").strip()


def missing_help(cls: type, prefix: str = "") -> list[str]:
    """The dotted names of the fields of ``cls`` and its nested sections that have no help."""
    missing = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        if not help_of(f):
            missing.append(name)
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            missing += missing_help(f.default_factory, name + ".")
    return missing
