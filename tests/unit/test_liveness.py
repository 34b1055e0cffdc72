"""Heartbeats and progress through a real c10d TCPStore: a busy rank, a stuck rank, a dead rank."""
import time

import pytest
import torch.distributed as dist

from seafl_dist.runtime.liveness import Heartbeat, StepCounter, Watcher


def store():
    return dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)


def settle(watcher, seconds):
    time.sleep(seconds)
    watcher._last_check = 0.0  # read the store now, not at the next half-second


def test_progress_that_moves_is_not_a_stall_and_progress_that_stops_is():
    s, progress = store(), StepCounter()
    beat = Heartbeat(s, 1, interval=0.05, progress=progress)
    watcher = Watcher(s, [1], limit_s=10.0, check_every_s=0.0)
    try:
        for _ in range(8):  # a long job: steps keep coming
            progress.step()
            settle(watcher, 0.1)
            assert watcher.stalled(1) < 0.35
        settle(watcher, 0.6)  # alive (still beating) but no step any more
        assert watcher.stalled(1) >= 0.5
        assert watcher.silent() == []
        progress.step()
        settle(watcher, 0.15)
        assert watcher.stalled(1) < 0.35
    finally:
        beat.stop()


def test_a_stopped_heartbeat_makes_the_rank_silent():
    s = store()
    beat = Heartbeat(s, 2, interval=0.05)
    watcher = Watcher(s, [2], limit_s=0.4, check_every_s=0.0)
    settle(watcher, 0.2)
    assert watcher.silent() == []
    beat.stop()
    settle(watcher, 0.1)
    watcher.silent()  # the watcher sees the last beat (one may land between its read and stop())
    settle(watcher, 0.7)
    assert [r for r, _ in watcher.silent()] == [2]


def rank_zero_check(watcher, owed, timeout_s):
    """Rank 0's liveness check on its own (its mailbox and outbox need live ranks, this does not)."""
    from seafl_dist.runtime.distributed import DistributedExecutor
    ex = DistributedExecutor.__new__(DistributedExecutor)
    ex.watcher, ex.owed, ex.timeout, ex.stall_floor_s = watcher, owed, timeout_s, 0.0
    return ex._check_alive


def test_rank_zero_fails_a_worker_stuck_on_its_job_but_not_one_that_just_got_it():
    from seafl_dist.runtime.distributed import WorkerLost
    s, progress = store(), StepCounter()
    beat = Heartbeat(s, 1, interval=0.05, progress=progress)
    watcher = Watcher(s, [1], limit_s=10.0, check_every_s=0.0)
    try:
        settle(watcher, 0.6)  # rank 1 idles, beating, with nothing to do
        check = rank_zero_check(watcher, {7: (1, time.monotonic())}, timeout_s=0.5)
        check(7)  # job 7 was just sent: the idle time before it does not count
        time.sleep(0.6)
        watcher._last_check = 0.0
        with pytest.raises(WorkerLost, match=r"worker rank 1 made no progress .* job 7"):
            check(7)
    finally:
        beat.stop()


def test_a_ranks_error_is_said_once_on_stderr_and_bad_input_is_left_to_the_cli(capsys):
    from seafl_dist.runtime.distributed import say_failure
    from seafl_dist.settings import ConfigError

    lost = RuntimeError("worker rank 2 stopped (no heartbeat for 3s)")
    say_failure(0, lost)
    say_failure(0, lost)  # launch.py's call after run_distributed's: already said
    say_failure(2, ValueError("boom"))
    say_failure(0, ConfigError("config key 'a.b' has value 1"))  # rank 0's CLI says it, as `seafl: error: ...`
    say_failure(1, FileNotFoundError("no data"))
    assert capsys.readouterr().err.splitlines() == [
        "seafl: error on rank 0: RuntimeError: worker rank 2 stopped (no heartbeat for 3s)",
        "seafl: error on rank 2: ValueError: boom"]
