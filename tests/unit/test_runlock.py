"""One writer per run dir (runtime/runlock.py): the lock is taken atomically, names its holder, beats,
and a stale one (its process gone, an earlier torchrun attempt, an old heartbeat) is taken over."""
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time

import pytest

from seafl_dist.runtime import runlock
from seafl_dist.runtime.runlock import NAME, RunDirBusy, RunDirLock


def write_lock(run_dir, *, age_s=0.0, **fields):
    """A lock file as another holder would have left it, its heartbeat ``age_s`` seconds old."""
    run_dir.mkdir(parents=True, exist_ok=True)
    info = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": None, "started": time.time() - age_s,
            "token": "theirs", "run_id": None, "attempt": None, **fields}
    path = run_dir / NAME
    path.write_text(json.dumps(info))
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


def test_acquire_names_the_holder_and_release_removes_it(tmp_path):
    lock = RunDirLock(tmp_path / "run").acquire()
    info = json.loads((tmp_path / "run" / NAME).read_text())
    assert info["host"] == socket.gethostname() and info["pid"] == os.getpid() and info["token"] == lock.token
    assert abs(info["started"] - time.time()) < 60
    assert [p.name for p in (tmp_path / "run").iterdir()] == [NAME], "the temp file used to link it is gone"
    lock.release()
    assert not (tmp_path / "run").joinpath(NAME).exists()


def test_a_second_writer_is_refused_in_one_line_naming_the_holder(tmp_path):
    with RunDirLock(tmp_path):
        before = (tmp_path / NAME).read_bytes()
        with pytest.raises(RunDirBusy) as err:
            RunDirLock(tmp_path).acquire()
        with pytest.raises(RunDirBusy):
            runlock.check_free(tmp_path)
        assert (tmp_path / NAME).read_bytes() == before
    msg = str(err.value)
    assert "\n" not in msg and f"run dir {tmp_path} is in use" in msg
    assert f"host {socket.gethostname()}, pid {os.getpid()}" in msg and "heartbeat 0s ago" in msg
    runlock.check_free(tmp_path)  # released: free again


def _race(run_dir, barrier, results):
    barrier.wait()
    try:
        RunDirLock(run_dir).acquire()  # never released: the winner's lock stays while the others try
        results.put("won")
        time.sleep(2)
    except RunDirBusy:
        results.put("refused")


def test_only_one_of_many_racing_processes_takes_the_lock(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n = 8
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(tmp_path, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = sorted(results.get(timeout=60) for _ in range(n))
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["refused"] * (n - 1) + ["won"]


def test_a_lock_whose_process_is_gone_is_taken_over_with_a_line(tmp_path, capsys):
    write_lock(tmp_path, pid=dead_pid())
    with RunDirLock(tmp_path) as lock:
        assert json.loads((tmp_path / NAME).read_text())["token"] == lock.token
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"taking over the lock of {tmp_path}" in err and "is gone" in err


def test_a_live_process_of_this_host_keeps_its_lock_even_with_an_old_heartbeat_limit_not_reached(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(tmp_path, pid=sleeper.pid, pid_start=runlock._pid_start(sleeper.pid), age_s=30)
        with pytest.raises(RunDirBusy, match=f"pid {sleeper.pid}"):
            RunDirLock(tmp_path).acquire()
        write_lock(tmp_path, pid=sleeper.pid, pid_start=12345)  # the pid was reused by another process
        assert "gone" in runlock.stale_reason(runlock.read(tmp_path / NAME))
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_killed_but_unreaped_holder_counts_as_gone(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.kill()
    time.sleep(0.5)  # a zombie until we wait for it, as an orphan of a dead parent may briefly be
    try:
        write_lock(tmp_path, pid=child.pid)
        assert "gone" in runlock.stale_reason(runlock.read(tmp_path / NAME))
    finally:
        child.wait()


def test_another_hosts_lock_is_stale_only_when_its_heartbeat_is_old(tmp_path, monkeypatch, capsys):
    write_lock(tmp_path, host="node-17", pid=4242, age_s=5)
    with pytest.raises(RunDirBusy, match="host node-17, pid 4242"):
        RunDirLock(tmp_path).acquire()
    write_lock(tmp_path, host="node-17", pid=4242, age_s=runlock.STALE_S + 30)
    with RunDirLock(tmp_path):
        pass
    assert "heartbeat is 150s old (limit 120s)" in capsys.readouterr().err
    monkeypatch.setenv("SEAFL_LOCK_STALE_S", "2")  # the documented knob
    write_lock(tmp_path, host="node-17", pid=4242, age_s=3)
    assert "limit 2s" in runlock.stale_reason(runlock.read(tmp_path / NAME))


def test_an_earlier_torchrun_attempt_of_the_same_job_is_taken_over(tmp_path, monkeypatch):
    write_lock(tmp_path, host="node-3", pid=99, run_id="job-7", attempt="0")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    with pytest.raises(RunDirBusy):  # the same attempt: a live rank 0 of this very job
        RunDirLock(tmp_path).acquire()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert "torchrun restarted" in runlock.stale_reason(runlock.read(tmp_path / NAME))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-8")  # another job (a new torchrun by hand): refused
    assert runlock.stale_reason(runlock.read(tmp_path / NAME)) is None


def test_the_heartbeat_thread_touches_the_lock_and_stops_on_release(tmp_path):
    lock = RunDirLock(tmp_path, heartbeat_s=0.05).acquire()
    try:
        old = time.time() - 1000
        os.utime(tmp_path / NAME, (old, old))
        deadline = time.time() + 10
        while runlock.read(tmp_path / NAME)["heartbeat_age"] > 100:
            assert time.time() < deadline, "no heartbeat"
            time.sleep(0.02)
    finally:
        lock.release()
    assert lock._thread is None and not (tmp_path / NAME).exists()


def test_release_leaves_a_lock_taken_over_by_another_run(tmp_path):
    lock = RunDirLock(tmp_path).acquire()
    write_lock(tmp_path, token="new-holder")  # as a takeover after a stale heartbeat would leave it
    lock.release()
    assert json.loads((tmp_path / NAME).read_text())["token"] == "new-holder"


def test_a_late_second_taker_leaves_the_lock_the_first_taker_just_took(tmp_path, capsys):
    """Two takers read the same stale lock; the first takes it over and holds it; the second, late,
    moves the first's fresh lock aside: seeing another token than the stale one it read, it puts it back."""
    write_lock(tmp_path, pid=dead_pid())
    stale = runlock.read(tmp_path / NAME)  # what the late taker read, before the first took over
    first = RunDirLock(tmp_path).acquire()
    try:
        capsys.readouterr()
        late = RunDirLock(tmp_path)
        late._take_over(stale, "process gone")
        assert json.loads((tmp_path / NAME).read_text())["token"] == first.token, "the late taker took the lock"
        assert "taking over" not in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == [NAME], "the late taker left a file behind"
        with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
            late.acquire()
    finally:
        first.release()


def test_the_heartbeat_stops_once_the_lock_is_taken_over(tmp_path, capsys):
    lock = RunDirLock(tmp_path, heartbeat_s=0.05).acquire()
    try:
        write_lock(tmp_path, token="new-holder", age_s=1000)  # a takeover's lock, its heartbeat old
        lock._thread.join(timeout=10)
        assert not lock._thread.is_alive(), "the heartbeat thread still runs on a lock that is no longer ours"
        time.sleep(0.3)  # six beats' time: nothing may touch the new holder's lock
        assert runlock.read(tmp_path / NAME)["heartbeat_age"] > 900, "the old holder beat the new holder's lock"
        warned = [ln for ln in capsys.readouterr().err.splitlines() if "was taken over" in ln]
        assert len(warned) == 1 and "two runs may now write it" in warned[0]
    finally:
        lock.release()
    assert json.loads((tmp_path / NAME).read_text())["token"] == "new-holder"
