"""``seafl_dist.run`` under torchrun (tests/api_driver.py on 3 ranks): the same promises on every rank.

SIGINT, SIGUSR1 and SIGTERM reach every rank at an exact point (``SEAFL_FAULT=...@*``, as torchrun
and Slurm deliver them): every rank raises :class:`seafl_dist.RunInterrupted`, the script goes on,
and its fourth call forms a new process group, resumes and completes byte-identical to an
uninterrupted run. A run that fails on rank 0 raises :class:`seafl_dist.RunFailed` on every rank;
nothing calls ``os._exit`` (each rank's script prints its outcome and ends normally).
"""
import json
import re
import subprocess
import sys

import pytest

from launching import clean_env
from resuming import ROOT, assert_same_run, reference
from small_runs import SMALL

pytestmark = pytest.mark.dist

DRIVER = ROOT / "tests" / "api_driver.py"


def drive(scenario, out, cwd):
    env = {**clean_env(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
                           str(DRIVER), scenario, str(out)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]  # every rank's script ended normally
    assert "terminate called" not in proc.stderr
    by_rank = {}
    for found in re.findall(r"RESULT (\{[^{}]*\})", proc.stdout):  # ranks' lines may run into each other
        r = json.loads(found)
        by_rank.setdefault(r["rank"], []).append(r)
    assert proc.stdout.count("CALLED []") == 3, proc.stdout
    return by_rank


def test_signals_interrupt_every_rank_and_the_next_call_resumes(tmp_path):
    ref = reference(tmp_path / "ref", SMALL)
    by_rank = drive("signals", tmp_path / "run", tmp_path)
    for rank in range(3):
        got = by_rank[rank]
        assert [(r["outcome"], r.get("signal")) for r in got] == [
            ("RunInterrupted", "SIGINT"), ("RunInterrupted", "SIGUSR1"), ("RunInterrupted", "SIGTERM"),
            ("returned", None)], (rank, got)
        assert all(r["handlers_restored"] for r in got)
        assert got[3]["status"] == ("completed" if rank == 0 else None)
    assert_same_run(ref, tmp_path / "run")


def test_a_failed_run_raises_run_failed_on_every_rank(tmp_path):
    by_rank = drive("fail", tmp_path / "run", tmp_path)
    for rank in range(3):
        (r,) = by_rank[rank]
        assert r["outcome"] == "RunFailed" and r["handlers_restored"], (rank, r)
    assert "injected failure" in by_rank[0][0]["message"] and by_rank[0][0]["summary"] == "failed"
    assert all("rank 0 failed" in by_rank[r][0]["message"] for r in (1, 2))
