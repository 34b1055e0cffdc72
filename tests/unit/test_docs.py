"""The docs match the code: README.md and docs/*.md, read the way a user would follow them.

Fails, naming page and line, on: a relative link or image that does not resolve (anchors included);
a config key (a dotted name whose first part is a section of seafl_dist.settings.Config, or
``section.*``) that does not exist; a ``seafl`` command in a shell block that the real parser
(seafl_dist.cli.build_parser) or the config loader refuses, or a usage line (```text) naming an
option that does not exist; a Python block that does not compile; a YAML config block that is
refused; a README test command other than the one .ci/run runs, or a README install line that
.ci/run does not run or that leaves an extra out. Python blocks fenced as ``python run`` are run,
page by page in a temporary directory; a Python block whose first line is ``# name.py`` is a
module the page's commands and blocks may import. The parser and the
Config are read when the test runs, so flags and keys added later are checked as they are.
"""
import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

import docs_checks as checks
from docs_pages import ROOT, pages, read_page

PAGES = pages()
IDS = [p.name for p in PAGES]


def _fail_on(problems):
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_relative_links_and_images_resolve(page):
    _fail_on(checks.link_problems(page))


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_config_keys_exist(page):
    _fail_on(checks.key_problems(page))


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_seafl_commands_parse_and_load(page, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # commands are run from the repository root
    _fail_on(checks.command_problems(page, tmp_path, PAGES))  # the modules of docs/extending.md, say


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_python_blocks_compile_and_yaml_configs_load(page):
    _fail_on(checks.python_problems(page) + checks.yaml_problems(page))


@pytest.mark.parametrize("page", [p for p in PAGES if checks.run_blocks(p)], ids=lambda p: p.name)
def test_python_run_blocks_run(page, tmp_path, monkeypatch):
    """The page's ``python run`` blocks, in order, sharing one namespace, in an empty directory."""
    if why := _missing_extra(page):
        pytest.skip(why)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    namespace = {"__name__": "__docs__"}
    with checks.page_modules([page], tmp_path):
        for block in checks.run_blocks(page):
            try:
                exec(compile(block.text, page.where(block.line), "exec"), namespace)
            except Exception as err:  # noqa: BLE001 (any failure of a documented example is the finding)
                pytest.fail(f"{page.where(block.line)}: the `python run` block raised {type(err).__name__}: {err}",
                            pytrace=False)


def _extras() -> dict[str, list[str]] | None:
    """pyproject.toml's optional dependencies, by extra; None on Python 3.10 (no tomllib to read them)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        return None
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _missing_extra(page) -> str | None:
    """Why a page's ``python run`` blocks cannot run here: they import a package of one of pyproject's extras
    (datasets.md: the hf extra's ``datasets``) that is not installed; None when all is there."""
    extras = _extras()
    if extras is None:
        return None
    extra_of = {re.split(r"[<>=!~\[;\s]", req)[0].lower().replace("-", "_"): name
                for name, reqs in extras.items() for req in reqs}
    for block in checks.run_blocks(page):
        for i, line in enumerate(block.text.splitlines()):
            module = (re.match(r"(?:import|from)\s+(\w+)", line) or [None, None])[1]
            if module in extra_of and importlib.util.find_spec(module) is None:
                return (f"{page.where(block.line + i)} imports {module}, from the {extra_of[module]!r} extra: "
                        f'pip install -e ".[dev,{extra_of[module]}]"')
    return None


def test_a_page_needing_an_extra_that_is_not_installed_is_skipped_naming_it(tmp_path, monkeypatch):
    page_file = tmp_path / "page.md"
    page_file.write_text("# p\n\n```python run\nimport numpy as np\nimport datasets\n```\n")
    page = read_page(page_file)
    assert _missing_extra(page) is None  # installed here
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    assert _missing_extra(page) == f"{page.where(5)} imports datasets, from the 'hf' extra: pip install -e \".[dev,hf]\""


def test_readme_test_command_is_what_ci_runs():
    readme = next(p for p in PAGES if p.name == "README.md")
    _fail_on([why] if (why := checks.readme_test_command_problem(readme)) else [])


def test_readme_is_a_short_front_page():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; reference text belongs in docs/ (issue 18: at most 200)"


def test_every_docs_page_is_linked_from_the_readme():
    readme = next(p for p in PAGES if p.name == "README.md")
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in checks.links(readme)}
    _fail_on([f"{p.name}: not linked from README.md" for p in PAGES[1:] if p.path.resolve() not in linked])


# ---- each check can fail: a page with one mistake of each kind --------------------------------

BROKEN = """# A broken page

See [the missing page](no_such_page.md), [a missing anchor](#nowhere) and ![a lost image](img/none.png).
Set `algorithm.buffer_sise` or `logging.wandb.*` (fine) or `clock.nothing.*`; `run.sbatch` is a file.

```bash
seafl run configs/quickstart.yaml algorithm.name=fedbux
seafl run configs/quickstart.yaml --no-such-flag
seafl run quickstart devices.numm=3 --out runs/x
sbatch slurm/run.sbatch configs/no_such_config.yaml
torchrun --nproc_per_node=2 -m seafl_dist run configs/quickstart.yaml model.name=mymod:tiny
```

```text
seafl run CONFIG [--outdir DIR]
```

```python
def broken(:
```

```yaml
algorithm: {theta: 2}
```

## Tests

```bash
pytest
```

Call `model.eval()`; `clock.idle` is a section.

```console
$ seafl run quickstart --outt x
seafl: error: it's a console block's output, quotes unbalanced
$ sbatch slurm/gone.sbatch
```
"""


def test_each_check_catches_its_mistake(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    page_file = tmp_path / "broken.md"
    page_file.write_text(BROKEN)
    page = read_page(page_file)
    (tmp_path / "mymod.py").write_text("def tiny(num_classes, in_channels, image_size, width):\n    pass\n")
    found = "\n".join(checks.link_problems(page) + checks.key_problems(page) + checks.command_problems(page, tmp_path)
                      + checks.python_problems(page) + checks.yaml_problems(page)
                      + [checks.readme_test_command_problem(page)])
    for expected in ["broken.md:3: link 'no_such_page.md' does not resolve", "broken.md:3: link '#nowhere'",
                     "link 'img/none.png' does not resolve",
                     "broken.md:4: config key 'algorithm.buffer_sise' does not exist",
                     "broken.md:4: 'clock.nothing.*': no config section",
                     "broken.md:7: `seafl run configs/quickstart.yaml algorithm.name=fedbux`: config key 'algorithm.name'",
                     "broken.md:8: `seafl run configs/quickstart.yaml --no-such-flag`: unrecognized arguments: --no-such-flag",
                     "broken.md:9: `seafl run quickstart devices.numm=3 --out runs/x`: override 'devices.numm=3'",
                     "broken.md:10: `seafl run configs/no_such_config.yaml`",
                     "broken.md:15: `seafl run CONFIG [--outdir DIR]`: seafl run has no option --outdir",
                     "broken.md:19: Python block does not compile",
                     "broken.md:23: YAML config is refused: config key 'algorithm.theta'",
                     "broken.md:29: the test command is 'pytest'; .ci/run runs 'python -m pytest -q "]:
        assert expected in found, f"missing {expected!r} in:\n{found}"
    assert "broken.md:35: `seafl run quickstart --outt x`: unrecognized arguments: --outt" in found, found
    assert "broken.md:37: no script slurm/gone.sbatch" in found, found
    for fine in ("logging.wandb.*", "run.sbatch", "model.eval", "clock.idle", "broken.md:36"):
        assert fine not in found, f"{fine!r} reported:\n{found}"
    assert "mymod:tiny" not in found  # the torchrun line imports the page's module and passes


# ---- the README's install line is what CI runs, and installs what the tests need (issue 63, 1) ----------------

def _install_block_pip_lines(page) -> list[str]:
    heading = next(n for n, line in page.prose if re.match(r"^##\s+Install\s*$", line))
    block = next(b for b in page.blocks if b.line > heading)
    return [ln.strip() for ln in block.text.splitlines() if ln.startswith("pip install ")]


def _readme_install(readme: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / ".ci/readme_install"), str(readme)], capture_output=True, text=True)


def test_ci_runs_the_readme_install_line_and_it_installs_every_extra():
    readme = next(p for p in PAGES if p.name == "README.md")
    lines = _install_block_pip_lines(readme)
    assert len(lines) == 1, lines
    printed = _readme_install(ROOT / "README.md")
    assert printed.returncode == 0 and printed.stdout.strip() == lines[0], printed
    ci = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert 'install="$(.ci/readme_install)"' in ci and 'eval "python -m ${install} --quiet"' in ci, ci
    assert not [ln for ln in ci if "pip install" in ln and "--upgrade pip" not in ln], ci  # no install line of its own
    # the README's extras install every optional package the project declares (the tests import them)
    if (extras := _extras()) is None:
        pytest.skip("Python 3.10 has no tomllib to read pyproject.toml's extras")
    named = re.search(r'"\.\[([\w,]+)\]"', lines[0]).group(1).split(",")
    installed = {req for name in named for req in extras[name]}
    missing = sorted({req for reqs in extras.values() for req in reqs} - installed)
    assert not missing, f"README's `{lines[0]}` leaves out {missing}: add their extra to it"


def test_readme_install_prints_only_the_install_blocks_line_and_refuses_none(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text('# x\n\n## Install\n\n```bash\npython3 -m venv .venv\npip install -e ".[a,b]"\n```\n\n'
                      'pip install not-in-a-block\n\n## Tests\n\n```bash\npip install pytest\n```\n')
    assert _readme_install(readme).stdout == 'pip install -e ".[a,b]"\n'
    readme.write_text("# x\n\n## Install\n\nnothing here\n\n## Tests\n\n```bash\npip install pytest\n```\n")
    refused = _readme_install(readme)
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert refused.stderr == f"{readme}: expected one `pip install` line in the ## Install block, found 0\n"


# ---- docs/running.md's events.jsonl tables hold every event and field the code writes (issue 63, 7) ----------

def _table_rows(page, header: str) -> dict[str, set[str]]:
    """{first cell's code names, joined by ',': the code names in the last cell} of the table under ``header``."""
    start = next(i for i, line in enumerate(page.lines) if line.startswith(header))
    rows = {}
    for line in page.lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = line.strip("|").split("|")
        names = re.findall(r"`([^`]+)`", cells[0])
        rows[",".join(names)] = set(names) | set(re.findall(r"`([a-z_]+)`", cells[-1]))
    return rows


def _written_events() -> tuple[dict[str, set[str]], set[str]]:
    """Read from the source: {event type: its keys} of every dict literal with a constant "event", and the keys of
    the dict literals of an aggregate's "updates"."""
    import ast
    events, entries = {}, set()
    for path in (ROOT / "seafl_dist").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict):
                continue
            keys = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
            kind = keys.get("event")
            if isinstance(kind, ast.Constant) and isinstance(kind.value, str) and " " not in kind.value:
                events.setdefault(kind.value, set()).update(keys)
                if isinstance(keys.get("updates"), ast.ListComp) and isinstance(keys["updates"].elt, ast.Dict):
                    entries |= {k.value for k in keys["updates"].elt.keys if isinstance(k, ast.Constant)}
    return events, entries


def test_the_events_tables_of_running_md_hold_every_event_and_field():
    import torch

    from seafl_dist.algo import BufferedUpdate, aggregate
    from seafl_dist.settings import config_from_dict
    page = next(p for p in PAGES if p.name == "docs/running.md")
    documented = _table_rows(page, "| event |")
    written, entries = _written_events()
    assert set(documented) == set(written) >= {"start", "notify", "finish", "aggregate", "eval", "drop", "stall"}
    for kind, keys in written.items():
        assert keys <= documented[kind], f"docs/running.md: `{kind}` leaves out {sorted(keys - documented[kind])}"
    w = torch.ones(6)
    ups = [BufferedUpdate(device=d, job=d, flat=flat, n_samples=3, base_version=0, epochs=1)
           for d, flat in enumerate([torch.randn(6, generator=torch.Generator().manual_seed(0)),
                                     torch.full((6,), float("nan"))])]
    for rule in ("seafl", "seafl2", "fedbuff", "fedasync", "fedavg", "port"):  # what each rule adds, kept and rejected
        alg = config_from_dict({}, [f"algorithm.name={rule}"]).algorithm
        entries |= {k for info in aggregate(alg, 1, w, ups, lambda v: w).info for k in info}
    fields = set().union(*_table_rows(page, "| field |").values())
    assert {"weight", "gamma", "a", "device"} <= entries and entries <= fields, sorted(entries - fields)


def test_the_docs_give_a_rule_the_arguments_the_code_calls_it_with():
    """issue 63, 2: docs/architecture.md and docs/extending.md name a rule's arguments as the code calls them: a
    built-in rule the six of its signature, a rule of your own the five of settings/plugins.py (``parts`` a
    keyword it may declare)."""
    import inspect

    from seafl_dist.algo.dispatch import RULES
    from seafl_dist.settings.plugins import SIGNATURES
    built_in = {tuple(n for n, p in inspect.signature(rule).parameters.items() if n != "state")  # a rule with memory
                for rule in RULES.values()}  # adds its keyword-only state (algo/memory.py)
    assert len(built_in) == 1, built_in
    built_in, yours = built_in.pop(), SIGNATURES["algorithm.name"][0]
    assert built_in == (*yours, "parts"), (built_in, yours)
    for name in ("docs/architecture.md", "docs/extending.md"):
        page = (ROOT / name).read_text()
        said = {tuple(a.strip() for a in args.split(",")) for args in re.findall(r"`(?:rule|f)\((cfg,[^)`]*)\)", page)}
        assert yours in said and said <= {yours, built_in}, f"{name}: a rule called with {said}"
        assert built_in in said or name != "docs/architecture.md", f"{name}: the built-in rules' {built_in} missing"
