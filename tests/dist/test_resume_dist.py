"""A torchrun run killed or stopped midway resumes, with any number of ranks, to the same bytes.

- W = 3 running SEAFL² (notifications in flight), rank 0 SIGKILLed during aggregation 3 by the
  ``SEAFL_FAULT`` hook (the last checkpoint is at 2; torchrun then stops the workers); copies
  of that run dir are resumed with W = 3 and with W = 1 (one process).
- W = 3 stopped from outside by SIGTERM to torchrun, which passes it to every rank: rank 0
  checkpoints and writes summary.json (interrupted), the workers exit, all non-zero; then
  resumed with W = 2.
Each resumed run's events.jsonl, metrics.csv and model.pt must equal an uninterrupted
one-process run's (the same as a torchrun one: tests/dist/test_equivalence.py).
"""
import shutil
import signal
import subprocess
import time

import pytest

from launching import clean_env, run_torchrun, torchrun_cmd, wait_for_aggregations
from resuming import assert_same_run, checkpoint_versions, cli, reference, run_args, summary
from small_runs import PER_ALGORITHM, SMALL

pytestmark = pytest.mark.dist

SEAFL2 = [*SMALL, "algorithm.name=seafl2", *PER_ALGORITHM["seafl2"], "run.checkpoint_every=2"]
LONGER = [*SMALL, "run.max_aggregations=20", "run.checkpoint_every=1"]


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """(reference dir, dir of a W = 3 run whose rank 0 was SIGKILLed during aggregation 3)."""
    base = tmp_path_factory.mktemp("seafl2")
    ref = reference(base / "ref", SEAFL2)
    env = {**clean_env(), "SEAFL_FAULT": "during_aggregate:3"}
    proc = subprocess.run(torchrun_cmd(3, *SEAFL2, "--out", "run"), cwd=base, env=env, capture_output=True,
                          text=True, timeout=240)
    out = base / "run"
    assert proc.returncode != 0 and not (out / "summary.json").exists(), proc.stderr[-3000:]
    assert checkpoint_versions(out) == [2]
    assert (out / "events.jsonl").read_text().count('"event": "aggregate"') == 3  # cut away on resume
    return ref, out


@pytest.mark.parametrize("world", [3, 1])
def test_killed_torchrun_resumes_with_any_world_size(world, killed, tmp_path):
    ref, src = killed
    out = tmp_path / "run"
    shutil.copytree(src, out)
    if world == 1:
        proc = cli(*run_args(SEAFL2, out))
    else:
        proc = run_torchrun(world, *SEAFL2, "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed {out} after aggregation 2" in proc.stderr
    assert_same_run(ref, out)


def test_sigterm_stops_every_rank_and_resumes_with_fewer(launcher, tmp_path):
    ref = reference(tmp_path / "ref", LONGER)
    launch = launcher(3, *LONGER, "--out", "run", cwd=tmp_path)
    out = tmp_path / "run"
    wait_for_aggregations(out / "events.jsonl", 3, launch)
    launch.proc.send_signal(signal.SIGTERM)  # torchrun passes it on to each rank
    code, _, err = launch.wait(timeout=120)
    assert code != 0
    s = summary(out)
    assert s["status"] == "interrupted" and "SIGTERM" in s["error"], s
    assert checkpoint_versions(out) and s["aggregations"] < 20
    for rank in (1, 2):  # the workers saw the signal too and left
        assert f"seafl: rank {rank} stopped: received signal SIGTERM" in err, err[-3000:]
    t0 = time.monotonic()
    proc = run_torchrun(2, *LONGER, "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed" in proc.stderr, time.monotonic() - t0
    assert_same_run(ref, out)
