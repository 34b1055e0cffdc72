"""The README's examples end well (issue 30): every single run it shows on a CPU (`seafl run ...`, the same
under torchrun, the one with a model and a rule of one's own) and its Python API call, run as written,
each in an empty directory (the two that name the same run dir, the FedBuff command and the API call, share
one, as a reader running the README top to bottom would: the call returns the command's completed run), end
`completed`, without `diverged_at`, and with a final accuracy within 0.02
of the best. The commands are read from the README, so an example changed there is the one run here."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docs_checks import page_modules
from seafl_dist.report.trace import check_run
from docs_pages import ROOT, pages, read_page, seafl_commands, shell_lines, tokens

README = read_page(ROOT / "README.md")


def examples() -> list[tuple[int, str]]:
    """(line, command) of each single run the README's shell blocks start on this machine (`seafl run`,
    `torchrun ... run`; not `sbatch`); (line, code) of its API block."""
    found = []
    for block in README.blocks:
        if block.lang in ("bash", "sh", "shell"):
            found += [(n, line) for n, line in shell_lines(block) if tokens(line)[:1] in (["seafl"], ["torchrun"])
                      and any(args[:1] == ["run"] and "--dry-run" not in args for args in seafl_commands(line))]
        elif block.lang == "python" and "seafl_dist.run(" in block.text:
            found.append((block.line, block.text))
    return found


EXAMPLES = examples()


def test_the_readme_shows_the_examples_this_test_runs():
    kinds = [("python" if "seafl_dist.run(" in text else tokens(text)[0]) for _, text in EXAMPLES]
    assert kinds.count("seafl") >= 3 and kinds.count("torchrun") == 1 and kinds.count("python") == 1, EXAMPLES


def run_dir(cwd: Path, text: str) -> Path:
    """The example's run dir: its --out (or out=), else the one dir it made under runs/."""
    args = tokens(text) if "seafl_dist.run(" not in text else []
    if "--out" in args:
        return cwd / args[args.index("--out") + 1]
    if 'out="' in text:
        return cwd / text.split('out="', 1)[1].split('"', 1)[0]
    (made,) = [p for p in (cwd / "runs").iterdir() if p.is_dir()]
    return made


def named_dir(text: str) -> str | None:
    """The run dir an example names (--out or out=), as written; None if it names none."""
    args = tokens(text) if "seafl_dist.run(" not in text else []
    if "--out" in args:
        return args[args.index("--out") + 1]
    return text.split('out="', 1)[1].split('"', 1)[0] if 'out="' in text else None


@pytest.fixture(scope="module")
def shared():
    """{run dir named by two examples: the directory both run in}: a reader who runs the README top to bottom runs
    the API call in the directory where the command line made runs/fb, and the API returns that completed run."""
    return {}


@pytest.mark.parametrize("line, text", EXAMPLES, ids=[f"README.md:{n}" for n, _ in EXAMPLES])
def test_a_readme_example_ends_well(line, text, tmp_path, shared):
    name = named_dir(text)
    if name is not None and sum(named_dir(t) == name for _, t in EXAMPLES) > 1:
        tmp_path = shared.setdefault(name, tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           # `seafl` and `torchrun` of this interpreter's environment, as an activated venv gives them
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    with page_modules(pages(), tmp_path):  # the modules docs/extending.md writes (mymodels.py, myrules.py)
        cmd = [sys.executable, "-c", text] if "seafl_dist.run(" in text else tokens(text)
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"README.md:{line}: {text}\n{proc.stderr[-3000:]}"
    s = json.loads((run_dir(tmp_path, text) / "summary.json").read_text())
    assert s["status"] == "completed" and s["diverged_at"] is None, (text, s)
    assert s["final_accuracy"] >= s["best_accuracy"] - 0.02, (text, s["final_accuracy"], s["best_accuracy"])
    if tokens(text) == ["seafl", "run", "configs/quickstart.yaml"]:  # the first run, at this machine's default ISA
        # (test_cli_quickstart.py runs it at AVX2's): the outcome docs/running.md promises on every machine
        assert s["final_accuracy"] >= 0.95 and "diverged" not in proc.stderr, s
        ttt = s["time_to_target"]["0.9"]
        assert ttt is not None and ttt <= s["virtual_time"], s
        assert check_run(run_dir(tmp_path, text)) == []
