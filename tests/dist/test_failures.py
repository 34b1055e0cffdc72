"""A dead, frozen or interrupted rank ends the whole torchrun job, named, with a summary, never a hang.

Each test starts a long run (100,000 aggregations), waits until the trace shows a few
aggregations, then hurts it: SIGKILL a worker, SIGSTOP a worker (it stops answering but its
sockets stay open, so only the heartbeat can tell), or SIGTERM the torchrun launcher. And
the converse: a worker that is merely slow (one job longer than the timeout) is not failed.
"""
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from launching import run_torchrun, wait_for_aggregations
from small_runs import SMALL

pytestmark = pytest.mark.dist

LONG = [*SMALL, "run.max_aggregations=100000"]


def read_summary(run):
    path = run / "summary.json"
    assert path.exists(), f"rank 0 wrote no summary.json in {run}"
    return json.loads(path.read_text())


def names_rank(text: str, rank: int) -> bool:
    """'rank 2' as we print it, or 'rank      : 2' as torchrun's failure report does."""
    return re.search(rf"\brank\s*:?\s*{rank}\b", text) is not None


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie that torchrun has not reaped yet has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_killed_worker_ends_the_job_within_the_timeout(launcher, tmp_path):
    timeout_s = 30
    run = tmp_path / "run"
    job = launcher(3, *LONG, f"runtime.timeout_s={timeout_s}", "--out", run, cwd=tmp_path)
    wait_for_aggregations(run / "events.jsonl", 3, job)
    victim = job.rank_pid(2)
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    rc, _, err = job.wait(timeout=timeout_s + 30)
    elapsed = time.monotonic() - t0
    assert rc != 0
    assert elapsed < timeout_s, f"torchrun took {elapsed:.1f}s to exit after a worker died"
    summary = read_summary(run)
    assert summary["status"] in ("failed", "interrupted"), summary
    assert names_rank(err + (summary["error"] or ""), 2), err[-3000:]
    assert summary["aggregations"] >= 3  # what rank 0 had is written
    assert not any(os.path.exists(f"/proc/{pid}") for pid in job.children())


def test_frozen_worker_is_named_by_its_missing_heartbeat(launcher, tmp_path):
    # timeout_s = 16 -> heartbeat limit 8 s. A stopped process keeps its sockets open, so no
    # transport error comes: rank 0 must notice the silence on its own. (At timeout 6, CI's loaded 2 cores once
    # kept a worker from any progress for 6 s before the freeze: WorkerLost "stuck", so the run ended early.)
    timeout_s = 16
    run = tmp_path / "run"
    job = launcher(3, *LONG, f"runtime.timeout_s={timeout_s}", "--out", run, cwd=tmp_path)
    wait_for_aggregations(run / "events.jsonl", 3, job)
    victim, rank0 = job.rank_pid(2), job.rank_pid(0)
    os.kill(victim, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        while not (run / "summary.json").exists() and time.monotonic() - t0 < timeout_s + 20:
            time.sleep(0.1)
        named_after = time.monotonic() - t0
        # rank 0 says why on stderr after its summary, while it takes the group down (bounded): the victim stays
        # frozen until rank 0 has ended, as a frozen machine would, so that the victim, continued, cannot end the
        # job (torchrun SIGTERMs every rank when one fails) before rank 0 has said it
        while running(rank0) and time.monotonic() - t0 < timeout_s + 60:
            time.sleep(0.1)
    finally:
        # torchrun now SIGTERMs the rest; a stopped process only gets it once continued
        # (otherwise torchrun waits 30 s before SIGKILL).
        os.kill(victim, signal.SIGCONT)
    rc, _, err = job.wait(timeout=60)
    assert rc != 0
    summary = read_summary(run)
    assert summary["status"] == "failed", summary
    assert "worker rank 2" in summary["error"] and "heartbeat" in summary["error"], summary["error"]
    assert "worker rank 2" in err, err
    assert named_after < timeout_s, f"rank 0 took {named_after:.1f}s to name a frozen worker"


def test_sigterm_to_torchrun_ends_every_rank(launcher, tmp_path):
    run = tmp_path / "run"
    job = launcher(3, *LONG, "runtime.timeout_s=30", "--out", run, cwd=tmp_path)
    wait_for_aggregations(run / "events.jsonl", 3, job)
    assert len([job.rank_pid(r) for r in range(3)]) == 3
    rc, err, elapsed = job.terminate()
    assert rc != 0
    assert elapsed < 15, f"torchrun took {elapsed:.1f}s to stop after SIGTERM"
    summary = read_summary(run)
    assert summary["status"] == "interrupted", summary
    assert "SIGTERM" in summary["error"]
    assert "seafl: rank 0 stopped" in err


def test_a_job_longer_than_the_timeout_is_not_a_dead_worker(tmp_path):
    # one device's job: ~700 samples, batch 1, 20 epochs: ~10 s of training on an idle core (longer on a busy
    # one), during which the worker sends nothing; with runtime.timeout_s=4 only its progress shows it is alive
    # (at timeout 1, i.e. the 3 s floor, CI's loaded 2 cores once starved the worker that long: WorkerLost)
    timeout_s = 4
    run = tmp_path / "run"
    proc = run_torchrun(2, "devices.num=2", "devices.concurrency=1", "algorithm.buffer_size=1", "data.partition=iid",
                        "train.batch_size=1", "train.epochs=20", "run.max_aggregations=1", "runtime.threads=1",
                        "runtime.device=cpu", f"runtime.timeout_s={timeout_s}", "logging.progress=none", "--out", run,
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "completed" and summary["aggregations"] == 1, summary
    assert summary["wall_time_s"] > timeout_s + 1, f"the job took {summary['wall_time_s']:.1f}s: not longer than the timeout"
