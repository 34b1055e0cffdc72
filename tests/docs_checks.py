"""What a page must get right, checked against the code as it is now (the real parser and Config).

Each ``*_problems(page)`` returns ``["page:line: what is wrong", ...]``; tests/unit/test_docs.py
runs them over README.md and docs/*.md, and over broken pages to show that each one can fail.
"""
from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import yaml

from docs_pages import (ROOT, SHELL_LANGS, Page, config_keys, in_mapping, key_mentions, key_pattern, key_problem,
                        link_problem, links, seafl_commands, shell_lines)


def link_problems(page: Page) -> list[str]:
    return [f"{page.where(n)}: {why}" for n, target in links(page) if (why := link_problem(page, target))]


def key_problems(page: Page) -> list[str]:
    keys, sections = config_keys()
    top = {s for s in sections if "." not in s}
    return [f"{page.where(n)}: {why}" for n, key in key_mentions(page, key_pattern(top))
            if (why := key_problem(key, keys, sections))]


# ---- commands ------------------------------------------------------------------------------

def _parse(argv: list[str]):
    """``argv`` as ``seafl`` parses it (seafl_dist.cli.main's rules): (namespace, None) or (None, error)."""
    from seafl_dist.cli import build_parser
    parser, err = build_parser(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args, extra = parser.parse_known_args(argv)
    except SystemExit:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "rejected by the parser"
    stray = [x for x in extra if x.startswith("-") or "=" not in x or not hasattr(args, "overrides")]
    if stray:
        return None, "unrecognized arguments: " + " ".join(stray)
    if extra:
        args.overrides = list(args.overrides) + extra
    if args.command is None:
        return None, "no subcommand"
    return args, None


def _override_problems(overrides: list[str]) -> list[str]:
    from seafl_dist.settings import ConfigError, parse_override
    keys, _ = config_keys()
    out = []
    for text in overrides:
        try:
            key, _ = parse_override(text)
        except ConfigError as err:
            out.append(str(err))
            continue
        if key not in keys and not in_mapping(key):
            out.append(f"override '{text}': config key '{key}' does not exist in seafl_dist.settings")
    return out


def _config_problem(args) -> str | None:
    """Load what ``seafl run``/``seafl sweep`` would load (configs, overrides, plugins): its ConfigError, or None."""
    from seafl_dist.settings import ConfigError, load_config
    config = getattr(args, "config", None)
    if args.command not in ("run", "sweep") or not config or getattr(args, "resume", None):
        return None
    if args.command == "run" and "=" in config and not Path(config).exists():  # `seafl run --resume D k=v`
        return None
    try:
        if args.command == "run":
            load_config(config, args.overrides)
        else:
            from seafl_dist.experiments import load_sweep, parse_grid_arg
            from seafl_dist.experiments.sweep import parse_seeds
            load_sweep(config, grid=[parse_grid_arg(g) for g in args.grid], overrides=args.overrides,
                       seeds=parse_seeds(args.seeds) if args.seeds else None).expand()
    except (ConfigError, FileNotFoundError) as err:
        return str(err)
    return None


def command_problem(argv: list[str]) -> str | None:
    """Why ``seafl ARGV`` would be refused before anything runs, or None."""
    args, error = _parse(argv)
    if error:
        return error
    bad = _override_problems(getattr(args, "overrides", []) or [])
    return "; ".join(bad) if bad else _config_problem(args)


def synopsis_problem(argv: list[str]) -> str | None:
    """A usage line (``seafl run CONFIG [key.sub=value ...] [--out DIR]``): the subcommand and every option it names exist."""
    from seafl_dist.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    if not argv or argv[0] not in sub.choices:
        return f"no subcommand '{argv[0] if argv else ''}' (known: {', '.join(sub.choices)})"
    known = sub.choices[argv[0]]._option_string_actions
    unknown = [o for o in (re.sub(r"[\[\]]", "", a).split("=")[0] for a in argv[1:]) if o.startswith("-") and o not in known]
    return f"seafl {argv[0]} has no option {', '.join(unknown)}" if unknown else None


@contextlib.contextmanager
def page_modules(pages: list[Page], folder: Path):
    """The pages' module blocks (first line ``# name.py``) as files in ``folder``, importable meanwhile."""
    names = []
    for block in (b for page in pages for b in page.blocks):
        m = re.match(r"#\s*([A-Za-z_]\w*)\.py\s*$", block.text.splitlines()[0]) if block.lang == "python" else None
        if m:
            (folder / f"{m.group(1)}.py").write_text(block.text)
            names.append(m.group(1))
    sys.path.insert(0, str(folder))
    try:
        yield names
    finally:
        sys.path.remove(str(folder))
        for name in names:
            sys.modules.pop(name, None)


def _commands(block, line: str) -> list[list[str]]:
    """The ``seafl`` argument lists of one line: any command of a shell block; in a ```text block
    (usage lines and output) only a line that starts with ``seafl ``."""
    if block.lang != "text":
        return seafl_commands(line)
    return [line.split()[1:]] if re.match(r"^\s*seafl\s", line) else []


def command_problems(page: Page, folder: Path, modules: list[Page] = ()) -> list[str]:
    """Every ``seafl`` command in the page's shell blocks parses and loads (importing the module blocks
    of ``modules``, the page itself included); every usage line names real options."""
    out = []
    with page_modules([page, *modules], folder):
        for block in page.blocks:
            if block.lang not in SHELL_LANGS:
                continue
            check = synopsis_problem if block.lang == "text" else command_problem
            for number, line in shell_lines(block):
                try:
                    argvs = _commands(block, line)
                except ValueError as err:  # unbalanced quotes
                    out.append(f"{page.where(number)}: cannot split '{line.strip()}': {err}")
                    continue
                out += [f"{page.where(number)}: `seafl {' '.join(argv)}`: {why}" for argv in argvs if (why := check(argv))]
                out += [f"{page.where(number)}: no script {s}" for s in re.findall(r"(?<![\w/])slurm/[\w.-]+\.sbatch\b", line)
                        if not (ROOT / s).is_file()]
    return out


# ---- code blocks ---------------------------------------------------------------------------

def python_problems(page: Page) -> list[str]:
    out = []
    for block in page.blocks:
        if block.lang == "python":
            try:
                compile(block.text, page.where(block.line), "exec")
            except SyntaxError as err:
                out.append(f"{page.where(block.line + (err.lineno or 1) - 1)}: Python block does not compile: {err.msg}")
    return out


def yaml_problems(page: Page) -> list[str]:
    """YAML blocks parse; one whose top-level keys are all config sections is a valid config."""
    from seafl_dist.settings import ConfigError, config_from_dict
    _, sections = config_keys()
    out = []
    for block in (b for b in page.blocks if b.lang in ("yaml", "yml")):
        try:
            data = yaml.safe_load(block.text)
        except yaml.YAMLError as err:
            out.append(f"{page.where(block.line)}: YAML block does not parse: {err}")
            continue
        if isinstance(data, dict) and data and set(data) <= sections | {"name"}:
            try:
                config_from_dict(data)
            except ConfigError as err:
                out.append(f"{page.where(block.line)}: YAML config is refused: {err}")
    return out


def run_blocks(page: Page) -> list:
    return [b for b in page.blocks if b.lang == "python" and "run" in b.words[1:]]


def ci_test_command() -> str:
    lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines() if re.match(r"\s*python -m pytest\b", ln)]
    assert len(lines) == 1, f".ci/run: expected one `python -m pytest` line, found {lines}"
    return lines[0]


def readme_test_command_problem(page: Page) -> str | None:
    """README's "Tests" section opens with a block holding exactly the test command of .ci/run."""
    heading = next((n for n, line in page.prose if re.match(r"^#{2,3}\s+Tests\s*$", line)), None)
    if heading is None:
        return f"{page.name}: no '## Tests' section"
    block = next((b for b in page.blocks if b.line > heading), None)
    expected = ci_test_command()
    if block is None or block.text.strip() != expected:
        got = block.text.strip() if block else "nothing"
        return f"{page.where(block.line if block else heading)}: the test command is '{got}'; .ci/run runs '{expected}'"
    return None
