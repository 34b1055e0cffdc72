"""Markdown pages read as a user reads them: fenced blocks, links, config keys and commands.

tests/unit/test_docs.py checks what this finds against the code. Everything here works on plain
text with line numbers, so a problem is reported as ``page:line: what is wrong``.
"""
from __future__ import annotations

import dataclasses
import io
import re
import shlex
import tokenize
import typing
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(\s{0,3})(`{3,}|~{3,})\s*(.*)$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_LINK = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# file names that look like config keys (run.sbatch, model.pt, train.py) are not keys
FILE_SUFFIXES = {"py", "pt", "sbatch", "yaml", "yml", "json", "jsonl", "csv", "md", "png", "txt", "sh", "gz", "tmp"}
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "text"}


@dataclass
class Block:
    """A fenced code block: ``lang`` is the first word of its info string, ``line`` that of its first content line."""
    page: Path
    line: int
    lang: str
    info: str
    text: str

    @property
    def words(self) -> list[str]:
        return self.info.split()


@dataclass
class Page:
    path: Path
    lines: list[str]
    blocks: list[Block]
    prose: list[tuple[int, str]]  # (line number, text) of every line outside fenced blocks

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix() if self.path.is_relative_to(ROOT) else self.path.name

    def where(self, line: int) -> str:
        return f"{self.name}:{line}"


def read_page(path: Path) -> Page:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, prose, open_fence = [], [], None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if open_fence is None:
            if m:
                open_fence = (m.group(2), m.group(3).strip(), number + 1, [])
            else:
                prose.append((number, line))
        elif m and m.group(2)[0] == open_fence[0][0] and len(m.group(2)) >= len(open_fence[0]) and not m.group(3):
            marker, info, first, body = open_fence
            blocks.append(Block(path, first, (info.split() or [""])[0].lower(), info, "\n".join(body) + "\n"))
            open_fence = None
        else:
            open_fence[3].append(line)
    if open_fence is not None:
        raise AssertionError(f"{path}:{open_fence[2] - 1}: a code fence is never closed")
    return Page(path, lines, blocks, prose)


def pages() -> list[Page]:
    return [read_page(p) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]


# ---- links --------------------------------------------------------------------------------

def links(page: Page) -> list[tuple[int, str]]:
    """(line, target) of every link and image outside code: inline, reference-style and HTML."""
    found = []
    for number, line in page.prose:
        text = CODE_SPAN.sub("", line)
        found += [(number, t) for t in LINK.findall(text) + HTML_LINK.findall(text)]
        m = REF_LINK.match(text)
        if m:
            found.append((number, m.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    seen: dict[str, int] = {}
    for _, line in page.prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            seen.setdefault(base if n == 0 else f"{base}-{n}", 1)
    return set(seen)


def link_problem(page: Page, target: str) -> str | None:
    """Why a relative ``target`` of ``page`` does not resolve, or None (absolute URLs are not checked)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
        return None
    path, _, anchor = target.partition("#")
    dest = (page.path.parent / path).resolve() if path else page.path
    if not dest.exists():
        return f"link '{target}' does not resolve: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(read_page(dest)):
        return f"link '{target}': {dest.name} has no heading with anchor #{anchor}"
    return None


# ---- config keys --------------------------------------------------------------------------

def config_keys() -> tuple[set[str], set[str]]:
    """(every key by full dotted name, every section and subsection) of the real Config, read now."""
    from seafl_dist.settings import Config
    keys, sections = set(), set()

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                sections.add(prefix + f.name)
                walk(hints[f.name], prefix + f.name + ".")
            elif prefix:
                keys.add(prefix + f.name)
    walk(Config, "")
    return keys, sections


def in_mapping(key: str) -> bool:
    """Whether ``key`` names an entry of a key whose value is a mapping (``algorithm.params.beta``): a name of
    the user's own that a page, an override or a sweep may set."""
    from seafl_dist.settings import Config
    from seafl_dist.settings.domains import base_type
    cls, parts = Config, key.split(".")
    for i, part in enumerate(parts[:-1]):
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        if dataclasses.is_dataclass(hints[part]):
            cls = hints[part]
            continue
        return i > 0 and base_type(hints[part]) is dict
    return False


def key_pattern(top: set[str]) -> re.Pattern:
    """Dotted names that start with a section; not inside a longer name, not a call (``model.eval()``)."""
    names = "|".join(sorted(top, key=len, reverse=True))
    return re.compile(rf"(?<![\w./$-])(?:{names})(?:\.(?:[A-Za-z_]\w*|\*))+(?![\w(])")


def key_problem(key: str, keys: set[str], sections: set[str]) -> str | None:
    """Why ``key`` (as written in a page) is not a config key, or None; ``section.*`` names every key of a section."""
    if key.rsplit(".", 1)[-1] in FILE_SUFFIXES:
        return None
    if key.endswith(".*"):
        return None if key[:-2] in sections else f"'{key}': no config section '{key[:-2]}'"
    if key in keys or key in sections or in_mapping(key):  # a subsection (`clock.idle`) is a name a page may use
        return None
    return f"config key '{key}' does not exist in seafl_dist.settings"


def python_strings(source: str) -> list[tuple[int, str]]:
    """(line offset, text) of the string literals and identifiers of Python source (where keys can hide)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.STRING:
                out.append((tok.start[0] - 1, tok.string))
            elif tok.type == tokenize.NAME and "__" in tok.string.strip("_"):
                out.append((tok.start[0] - 1, tok.string.replace("__", ".")))  # api kwargs: algorithm__name
    except (tokenize.TokenError, SyntaxError):  # a block that does not compile is reported as such
        pass
    return out


def key_mentions(page: Page, pattern: re.Pattern) -> list[tuple[int, str]]:
    """(line, key) of every dotted name that starts with a config section: in prose, in code blocks,
    and in Python blocks only inside string literals and ``section__key`` keyword names."""
    found = [(n, m.group(0)) for n, line in page.prose for m in pattern.finditer(line)]
    for block in page.blocks:
        if block.lang == "python":
            found += [(block.line + i, m.group(0)) for i, s in python_strings(block.text) for m in pattern.finditer(s)]
        else:
            found += [(block.line + i, m.group(0)) for i, line in enumerate(block.text.splitlines())
                      for m in pattern.finditer(line)]
    return found


# ---- commands ------------------------------------------------------------------------------

SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&", ";;"}
SBATCH_SCRIPTS = {"run.sbatch": "run", "multinode.sbatch": "run", "sweep.sbatch": "sweep"}


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """(line, logical line) of a shell block: continuations joined, prompts dropped."""
    out, pending, start = [], "", 0
    for i, line in enumerate(block.text.splitlines()):
        if not pending:
            start = block.line + i
            if block.lang == "console" and not line.startswith("$ "):
                continue  # a console block's output
        line = re.sub(r"^\$ ", "", line)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def tokens(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split, lex.commenters = True, "#"
    return list(lex)


def seafl_commands(line: str) -> list[list[str]]:
    """The argument lists that ``line`` hands to ``seafl`` (after ``seafl``, ``-m seafl_dist``, or a
    ``slurm/*.sbatch`` script, whose arguments go to ``seafl run``/``seafl sweep``); a quoted
    ``--wrap "seafl ..."`` counts too."""
    toks, found = tokens(line), []
    for i, tok in enumerate(toks):
        head = None
        if tok == "seafl" or tok.endswith("/seafl"):
            head = []
        elif tok == "seafl_dist" and i and toks[i - 1] == "-m":
            head = []
        elif tok.startswith("slurm/") and Path(tok).name in SBATCH_SCRIPTS:
            head = [SBATCH_SCRIPTS[Path(tok).name]]
        elif " " in tok and re.match(r"^(--wrap=)?seafl ", tok):
            found += seafl_commands(tok.split("=", 1)[1] if tok.startswith("--wrap=") else tok)
        if head is not None:
            rest = []
            for t in toks[i + 1:]:
                if t in SEPARATORS:
                    break
                rest.append(t)
            found.append(head + rest)
    return found
