"""The built-in models' traces keep their bytes: today's code against the code before the LightningModule
contract (issue "LightningModules as Lightning's own documentation writes them"), run here, side by side.

The package as it was at the reference commit of today's numerics version is taken from this clone's git history (``git archive``) and run
with the same configs on this machine, so the comparison does not depend on the CPU the bits were
made on. events.jsonl, metrics.csv and model.pt must be byte-identical, and config.yaml too (the new
keys are left out at their defaults), for one job at a time, fused jobs and SEAFL²'s partial jobs.
Without that history (a shallow clone) the test cannot make the old files and skips, saying so.
"""
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from seafl_dist import versions
from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[2]
# per numerics version (seafl_dist/versions.py): a commit whose built-in traces today's code must
# reproduce. A change that bumps NUMERICS adds its own first commit here.
BEFORE_BY_NUMERICS = {1: "6825129"}
CASES = {
    "one_at_a_time": [],
    "fused": ["runtime.batch_jobs=3", "model.name=resnet18", "model.width=0.125"],
    "partial": ["algorithm.name=seafl2", "train.epochs=2", "algorithm.staleness_limit=1", "run.seed=2"],
}


@pytest.fixture(scope="module")
def old_package(tmp_path_factory):
    assert versions.NUMERICS in BEFORE_BY_NUMERICS, (
        f"numerics version {versions.NUMERICS} has no reference commit: add its first commit to BEFORE_BY_NUMERICS")
    before = BEFORE_BY_NUMERICS[versions.NUMERICS]
    try:
        blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", before, "seafl_dist"],
                              check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"git revision {before} is not in this clone ({err}); the old files cannot be made")
    where = tmp_path_factory.mktemp("before")
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(where, filter="data")
    return where


def run(package: Path | None, out: Path, extra: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SEAFL_FAULT", "PYTHONPATH")}
    env["OMP_NUM_THREADS"] = "1"
    if package is not None:
        env["PYTHONPATH"] = str(package)
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *extra,
                           "--out", str(out)], cwd=out.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_built_in_runs_files_are_the_ones_the_code_before_wrote(case, old_package, tmp_path):
    run(old_package, tmp_path / "before", CASES[case])
    run(None, tmp_path / "now", CASES[case])
    for name in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "now" / name).read_bytes() == (tmp_path / "before" / name).read_bytes(), name
    assert not (tmp_path / "now" / "train_log.csv").exists()
