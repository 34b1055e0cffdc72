"""The configuration reference, generated from the code: every key by its full dotted name, with
its type, default, allowed values and help (declared with ``key(default, "help", domain)`` in
:mod:`.sections`; the allowed values in the words of the key's errors, :mod:`.domains`).

    python -m seafl_dist.settings.reference            # (re)write docs/configuration.md
    python -m seafl_dist.settings.reference --check    # exit 1 if docs/configuration.md is stale
    seafl configs --keys                               # the same list on a terminal

tests/unit/test_config_reference.py fails when the committed page differs from :func:`markdown`.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seafl_dist.settings.core import Config
from seafl_dist.settings.domains import describe, domain_of
from seafl_dist.settings.keys import help_of

COMMAND = "python -m seafl_dist.settings.reference"
CHECKOUT = Path(__file__).resolve().parents[2]
PAGE = CHECKOUT / "docs" / "configuration.md"


@dataclass(frozen=True)
class Key:
    name: str  # full dotted name
    type: str
    default: str  # markdown: `value`, or prose where the value alone would mislead
    help: str
    note: str
    allowed: str  # the key's domain in words (settings/domains.py), as its errors say it


@dataclass(frozen=True)
class Section:
    name: str  # dotted; '' for the keys outside every section
    help: str
    keys: tuple[Key, ...]


# ---- reading the dataclasses ------------------------------------------------------------

def _type_text(tp: Any) -> str:
    """``Optional[int]`` reads ``int or null``; ``list`` and ``list[float]`` read ``list``."""
    args = typing.get_args(tp)
    if type(None) in args:
        return " or ".join(_type_text(a) for a in args if a is not type(None)) + " or null"
    return getattr(typing.get_origin(tp) or tp, "__name__", str(tp).replace("typing.", ""))


def _value_text(value: Any) -> str:
    """A default as it would be written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(_value_text, value)) + "]"
    return str(value)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def sections(cls: type = Config, name: str = "", help: str = "") -> list[Section]:
    """The sections of ``cls`` in declaration order, each followed by its nested sections; the
    top-level keys (``name``) come last, as the ones a config file sets least."""
    hints = typing.get_type_hints(cls)
    own, nested = [], []
    for f in dataclasses.fields(cls):
        dotted = f"{name}.{f.name}" if name else f.name
        if dataclasses.is_dataclass(hints[f.name]):
            nested += sections(hints[f.name], dotted, help_of(f))
            continue
        default = f.metadata.get("shown") or f"`{_value_text(_default(f))}`"
        own.append(Key(dotted, _type_text(hints[f.name]), default, help_of(f), f.metadata.get("note", "").strip(),
                       describe(domain_of(f, hints[f.name]), hints[f.name])))
    mine = [Section(name, help, tuple(own))] if own else []
    return nested + mine if not name else mine + nested


def keys() -> list[Key]:
    """Every key of a run configuration, in the reference's order."""
    return [k for s in sections() for k in s.keys]


# ---- writing them -------------------------------------------------------------------------

INTRO = f"""\
# Configuration reference

<!-- Generated from seafl_dist/settings/ by `{COMMAND}`: edit the help there, then rerun it. -->

A run's configuration is a YAML file with one mapping per section (`algorithm:`, `devices:`, ...);
every key it leaves out takes the default below. On the command line any key can be set by its
full dotted name, the value read as YAML (`null` is "none" or "no limit" where a key allows it):

```
seafl run quickstart algorithm.buffer_size=5 algorithm.staleness_limit=null
```

An unknown key, a value of the wrong type or one outside the key's allowed values stops the run
before anything is written, with one line naming the key, the value and what is allowed (for a
misspelt key or built-in name, the nearest known one), and the config file when the value came from
it rather than from an override. Numbers are finite: NaN and `-.inf` are refused everywhere,
and `.inf` only means something where a key allows "no limit" (it then reads as `null`). `1e-6`
is a number as well as `1.0e-6` (plain YAML reads the first as text). `seafl configs --keys` prints
this list on a terminal.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The whole of docs/configuration.md."""
    out = [INTRO.rstrip("\n")]
    for s in sections():
        title = f"`{s.name}`" if s.name else "Top level"
        out.append(f"\n## {title}\n")
        if s.help:
            out.append(s.help[0].upper() + s.help[1:] + ".\n")
        out.append("| key | type | default | allowed | meaning |\n|---|---|---|---|---|")
        out += [f"| `{k.name}` | {k.type} | {_cell(k.default)} | {_cell(k.allowed)} | {_cell(k.help)} |"
                for k in s.keys]
        notes = [f"- `{k.name}`: {k.note}" for k in s.keys if k.note]
        if notes:
            out.append("")
            out += notes
    return "\n".join(out) + "\n"


def text(width: int = 100) -> str:
    """The same keys for a terminal: each with its default and type, its help indented under it."""
    out = []
    wrap = textwrap.TextWrapper(width=width, initial_indent="      ", subsequent_indent="      ")
    for s in sections():
        out.append(f"{s.name or 'top level'}: {s.help}" if s.help else s.name or "top level")
        for k in s.keys:
            out.append(f"  {k.name} = {k.default.replace('`', '')}  ({k.type})")
            out += wrap.wrap(k.help.replace("`", ""))
            out += wrap.wrap("allowed: " + k.allowed)
            out += wrap.wrap(k.note.replace("`", ""))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write the configuration reference "
                                     "(docs/configuration.md) from the config dataclasses' help.")
    parser.add_argument("--out", type=Path, default=PAGE, help=f"where to write it (default: {PAGE})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs")
    args = parser.parse_args(argv)
    page = markdown()
    current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
    if args.check:
        if current != page:
            print(f"{args.out} is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if current != page:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page, encoding="utf-8")
    print(f"{args.out}: {len(keys())} keys", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
