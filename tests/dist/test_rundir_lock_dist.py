"""Orphans of a killed torchrun agent keep their run dir (issue 16, point 1: one writer per run dir).

A torchrun agent SIGKILLed on its own leaves its ranks running. Before the lock, a ``--resume``
started beside them loaded a checkpoint the orphans were deleting. Here rank 0 is frozen right
after aggregation 2 (``SEAFL_FAULT=after_aggregate:2:STOP``, checkpoint 2 written) and the agent
is killed: a ``--resume`` is refused in one line naming rank 0's host and pid, the dir untouched;
once the orphans are gone the same ``--resume`` takes the lock over (its holder's process is
gone) and ends byte-identical to an uninterrupted run.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launching import clean_env, torchrun_cmd
from resuming import assert_same_run, dir_bytes, reference
from seafl_dist.cli import main as seafl_main
from seafl_dist.runtime.runlock import NAME
from small_runs import SMALL

pytestmark = pytest.mark.dist

ARGS = [*SMALL, "run.checkpoint_every=1", "run.checkpoint_every_s=null"]


def stopped_rank0(lock: Path, agent: subprocess.Popen, timeout=180) -> int:
    """Rank 0's pid (from the lock it holds), once it has stopped itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert agent.poll() is None, (lock.parent.parent / "torchrun.log").read_text()[-3000:]
        if lock.exists():
            pid = json.loads(lock.read_text())["pid"]
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                return pid
        time.sleep(0.1)
    raise AssertionError("rank 0 never stopped after aggregation 2")


def test_orphans_of_a_killed_agent_keep_the_dir_until_they_are_gone(tmp_path, capsys):
    ref = reference(tmp_path / "ref", ARGS)
    out = tmp_path / "run"
    env = {**clean_env(), "SEAFL_FAULT": "after_aggregate:2:STOP"}
    log = open(tmp_path / "torchrun.log", "w")  # not a pipe: the orphans would hold it open
    agent = subprocess.Popen(torchrun_cmd(2, *ARGS, "--out", out), cwd=tmp_path, env=env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    ranks = []
    try:
        rank0 = stopped_rank0(out / NAME, agent)
        ranks = [int(p) for p in subprocess.run(["pgrep", "-P", str(agent.pid)], capture_output=True,
                                                  text=True).stdout.split()]
        assert rank0 in ranks and len(ranks) == 2
        agent.kill()  # the agent alone: its ranks go on as orphans
        agent.wait()
        capsys.readouterr()
        before = dir_bytes(out)
        assert seafl_main(["run", "--resume", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"run dir {out} is in use by another run: host " in err, err
        assert f"pid {rank0} (started " in err
        assert dir_bytes(out) == before
    finally:
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        log.close()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
              not in ("Z", "X") for p in ranks):
        assert time.monotonic() < deadline, "the orphans outlived SIGKILL"
        time.sleep(0.1)
    assert seafl_main(["run", "--resume", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"taking over the lock of {out} from host" in err and f"process {rank0} on" in err
    assert f"resumed {out} after aggregation 2" in err
    assert_same_run(ref, out)
