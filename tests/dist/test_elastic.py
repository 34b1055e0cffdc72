"""torchrun's own fault tolerance: ``--max-restarts`` restarts the ranks after a lost one, and the
restarted ranks resume from the run dir's last checkpoint by themselves (runtime/elastic.py).

- a worker SIGKILLed after aggregation 3 (``SEAFL_FAULT=after_aggregate:3:KILL@2``, sent by rank 0 at
  that exact point), and rank 0 SIGKILLed during aggregation 3 with no ``--out`` (the restarted
  rank 0 must find the first attempt's default run dir): both end byte-identical to an
  uninterrupted one-process run;
- SIGTERM to torchrun while the ranks form their process group (one rank held back by the hook):
  every rank is gone within seconds, not after torchrun's 30 s SIGKILL;
- SIGTERM to every rank (an interrupt that the agent did not get): the job stops, status
  ``interrupted``; torchrun's restart ends at once instead of resuming;
- a config error fails fast on every attempt, and is said once, not once per attempt.
"""
import os
import signal
import time
from pathlib import Path

import pytest

from launching import run_torchrun, wait_for_aggregations
from resuming import assert_same_run, reference, summary
from small_runs import SMALL

pytestmark = pytest.mark.dist

RUN = [*SMALL, "run.max_aggregations=8", "run.checkpoint_every=1"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("elastic") / "ref", RUN)


def test_a_killed_worker_is_restarted_and_the_run_resumes_to_the_same_bytes(ref, tmp_path):
    out = tmp_path / "run"
    proc = run_torchrun(3, *RUN, "--out", out, cwd=tmp_path, restarts=2, fault="after_aggregate:3:KILL@2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("seafl: running quickstart") == 2, proc.stderr[-3000:]  # one restart
    assert f"seafl: resumed {out} after aggregation" in proc.stderr
    assert_same_run(ref, out)


def test_a_killed_rank_0_is_restarted_into_the_same_default_run_dir(ref, tmp_path):
    proc = run_torchrun(3, *RUN, cwd=tmp_path, restarts=2, fault="during_aggregate:3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = list((tmp_path / "runs").iterdir())
    assert len(dirs) == 1, dirs  # the restarted rank 0 kept the first attempt's runs/<name>-<timestamp>
    assert "after aggregation 2" in proc.stderr and proc.stderr.count("seafl: running quickstart") == 2
    assert_same_run(ref, dirs[0])


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _wait_idle(pids, quiet_s=1.5, timeout=120.0) -> None:
    """Until none of ``pids`` uses CPU for ``quiet_s``: imports done, each blocked waiting for the group."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = [_cpu_ticks(p) for p in pids]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)
    raise AssertionError(f"ranks {pids} kept using CPU for {timeout}s")


def test_sigterm_while_the_group_forms_ends_every_rank_promptly(launcher, tmp_path):
    # rank 2 hangs before joining, so ranks 0 and 1 wait inside the store / process group
    # formation, in C++, where no Python handler runs
    job = launcher(3, *RUN, "--out", tmp_path / "run", cwd=tmp_path, restarts=2, fault="before_group:0:HANG@2")
    _wait_idle([job.rank_pid(r) for r in range(2)] + [job.rank_pid(2)])
    rc, err, elapsed = job.terminate()
    assert rc != 0
    assert elapsed < 10, f"torchrun took {elapsed:.1f}s to end after SIGTERM during start-up:\n{err[-2000:]}"
    assert not (tmp_path / "run").exists()  # nothing was written: no run had started


def test_an_interrupt_stops_the_job_and_is_not_turned_into_a_restart(launcher, tmp_path):
    out = tmp_path / "run"
    job = launcher(3, *SMALL, "run.max_aggregations=100000", "run.checkpoint_every=1", "--out", out, cwd=tmp_path,
                   restarts=2)
    wait_for_aggregations(out / "events.jsonl", 3, job)
    for r in range(3):  # the ranks get the signal, torchrun does not (so it would restart them)
        os.kill(job.rank_pid(r), signal.SIGTERM)
    rc, _, err = job.wait(timeout=120)
    assert rc != 0
    s = summary(out)
    assert s["status"] == "interrupted" and "SIGTERM" in s["error"], s
    assert "seafl: resumed" not in err, "an interrupted job was resumed by torchrun's restart"
    assert "the previous attempt was interrupted" in err, err[-3000:]
    assert list(out.glob("private/checkpoint-*.pt")), "the interrupt's checkpoint is kept for a rerun"


def test_a_config_error_fails_fast_on_every_attempt(tmp_path):
    t0 = time.monotonic()
    proc = run_torchrun(2, *SMALL, "algorithm.name=nope", "--out", tmp_path / "run", cwd=tmp_path, restarts=2)
    assert proc.returncode != 0
    # one line for the job, from rank 0's first attempt (torchrun's own log lines may run into it): the two
    # restarts find it said in the agent's store (runtime/elastic.py said_before)
    assert proc.stderr.count("seafl: error: config key 'algorithm.name'") == 1, proc.stderr[-3000:]
    assert proc.stderr.count("seafl: error") == 1, proc.stderr[-3000:]
    assert "seafl: running" not in proc.stderr and not (tmp_path / "run").exists()
    assert time.monotonic() - t0 < 120
