"""Helpers for the distributed tests: launch ``torchrun ... -m seafl_dist run`` on CPU (gloo).

Every launch uses ``--standalone`` (a fresh rendezvous on a free local port), so tests can run
beside other torchrun jobs on the same machine. Runs are tiny (digits, 10 devices, 4 in
flight); the cost is mostly W+1 interpreters importing torch and Lightning.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from resuming import reference
from small_runs import QUICKSTART


def torchrun_cmd(world: int, *run_args, restarts: int = 0) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
            f"--max-restarts={restarts}", "-m", "seafl_dist", "run", str(QUICKSTART), *map(str, run_args)]


def clean_env(fault: str | None = None) -> dict:
    """This environment without a surrounding torchrun's variables (a nested launch must not see
    them); ``fault`` sets SEAFL_FAULT (runtime/faults.py)."""
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE",
            "SEAFL_FAULT"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["OMP_NUM_THREADS"] = "1"
    if fault:
        env["SEAFL_FAULT"] = fault
    return env


def run_batch(world: int, cases: dict[str, list], where: Path, timeout=900,
              paths=()) -> tuple[subprocess.CompletedProcess, dict]:
    """Every case (name -> overrides of the tiny quickstart) run one after another by ONE torchrun job of ``world``
    ranks (tests/soak_driver.py, no kills), each into ``where/<name>``: the launch and every rank's interpreter
    start are paid once for all of them. (the finished process, {name: run dir}); the driver stops at the first
    case that fails, so a returncode of 0 means every case ran to its end. ``paths``: folders of users' modules the
    ranks must import (put on their PYTHONPATH after tests/)."""
    import json as _json
    tests = Path(__file__).resolve().parents[1]
    outs = {name: where / name for name in cases}
    plan = where / "plan.json"
    plan.write_text(_json.dumps({"cases": [{"args": [str(a) for a in args], "out": str(outs[n])}
                                           for n, args in cases.items()], "kills": []}))
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tests), *map(str, paths)] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           "--max-restarts=0", str(tests / "soak_driver.py"), str(plan)]
    return subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=timeout), outs


def run_torchrun(world: int, *run_args, cwd, timeout=240, restarts: int = 0, fault=None) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun_cmd(world, *run_args, restarts=restarts), cwd=cwd, env=clean_env(fault),
                          capture_output=True, text=True, timeout=timeout)


class Launch:
    """A torchrun started in the background, in its own process group (so a test can always clean up)."""

    def __init__(self, world: int, *run_args, cwd, restarts: int = 0, fault=None):
        self.proc = subprocess.Popen(torchrun_cmd(world, *run_args, restarts=restarts), cwd=cwd, env=clean_env(fault),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def rank_pid(self, rank: int, wait_s: float = 60.0) -> int:
        """The pid of the rank ``rank`` child (found by the RANK in its environment)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            kids = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
            for pid in kids:
                try:
                    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if f"RANK={rank}".encode() in env:
                    return int(pid)
            time.sleep(0.2)
        raise AssertionError(f"no child with RANK={rank} under torchrun pid {self.proc.pid}")

    def children(self) -> list[int]:
        return [int(p) for p in subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                                                 text=True).stdout.split()]

    def terminate(self, timeout: float = 60.0):
        """SIGTERM to torchrun: (exit code, stderr, seconds until it ended); no rank may outlive it."""
        ranks = self.children()
        self.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        rc, _, err = self.wait(timeout)
        elapsed = time.monotonic() - t0
        assert not any(os.path.exists(f"/proc/{pid}") for pid in ranks), "a rank outlived torchrun"
        return rc, err, elapsed

    def wait(self, timeout: float):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.communicate()


def wait_for_aggregations(events: Path, n: int, launch: Launch, timeout: float = 120.0) -> None:
    """Block until the run's trace shows ``n`` aggregations (the run is then well under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists() and events.read_text().count('"event": "aggregate"') >= n:
            return
        if launch.proc.poll() is not None:
            _, err = launch.proc.communicate()
            raise AssertionError(f"torchrun ended early (exit {launch.proc.returncode}):\n{err[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} aggregations in {events} after {timeout}s")


def in_process_and_on_ranks(world: int, overrides, where: Path) -> tuple[Path, Path]:
    """(run dir of ``overrides`` in this process, run dir of the same under torchrun with ``world`` ranks),
    under ``where``; the torchrun must end well, on ``world`` ranks."""
    ref = reference(where / "w1", overrides)
    cwd = where / "cwd"
    cwd.mkdir()
    proc = run_torchrun(world, *overrides, "--out", "run", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"on {world} ranks (gloo)" in proc.stderr
    return ref, cwd / "run"


def same_summary(ref: Path, got: Path) -> dict:
    """The torchrun run's summary.json, asserted equal to the reference's but for wall time."""
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s", None), s_got.pop("wall_time_s", None)  # absent under DP
    assert s_got == s_ref
    return s_got
