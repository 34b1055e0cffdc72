"""Two torchrun agents on this machine as two nodes, started the way slurm/multinode.sbatch starts them.

Each agent (``python -m seafl_dist.runtime.torchrun``: torchrun whose rendezvous errors are one line) gets
``--nnodes=2 --nproc_per_node=2`` and the same c10d rendezvous (``--rdzv_backend=c10d
--rdzv_endpoint=127.0.0.1:PORT``, ``--rdzv_conf=join_timeout=J``) on a free port, so the tests can run
beside other torchrun jobs. The agent that hosts the store is the first to arrive; which agent becomes
node 0 (ranks 0 and 1) is the rendezvous' choice, so a test finds a node's agent by the GROUP_RANK
in its ranks' environment. Each agent runs in its own session, and so does each of its ranks
(torchrun starts them that way): a lost node is its agent and its ranks SIGKILLed by pid. Every
process of a job carries the job's SEAFL_TEST_NODES mark in its environment, so the teardown
finds each one, restarted ranks and orphans included (an orphan holds the agent's pipes open).
"""
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from launching import clean_env
from small_runs import QUICKSTART

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_cmd(port: int, *run_args, nproc: int = 2, restarts: int = 0, join_timeout: int = 30,
             is_host: bool | None = None) -> list[str]:
    """One node's torchrun, as multinode.sbatch's ``srun`` starts it on every node; ``is_host`` (c10d's
    ``is_host`` of ``--rdzv_conf``) pins whether this agent hosts the rendezvous store rather than the first to
    bind it."""
    host = "" if is_host is None else f",is_host={int(is_host)}"
    return [sys.executable, "-m", "seafl_dist.runtime.torchrun", "--nnodes=2", f"--nproc_per_node={nproc}",
            f"--max-restarts={restarts}", "--rdzv_id=seafl-two-nodes", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_conf=join_timeout={join_timeout}{host}",
            "-m", "seafl_dist", "run", str(QUICKSTART), *map(str, run_args)]


class Nodes:
    """``count`` agents of one job (``nproc`` ranks each) started ~0.3 s apart; ``kill_all`` (the fixture's
    teardown) stops every process. ``pin_host``: the first agent hosts the rendezvous store (c10d's ``is_host``)
    instead of whichever binds its port first: a test that loses a node must not lose the store with it (the
    survivor could then only say it cannot reach the rendezvous). The rendezvous gives node 0 to the agent of the
    lower pid, the first started, so the store's host is node 0 too."""

    def __init__(self, *run_args, cwd, count: int = 2, nproc: int = 2, restarts: int = 0, join_timeout: int = 30,
                 fault=None, pin_host: bool = False):
        self.nproc = nproc
        port = free_port()
        self.agents: list[subprocess.Popen] = []
        self.mark = uuid.uuid4().hex
        for i in range(count):
            if i:
                time.sleep(0.3)
            cmd = node_cmd(port, *run_args, nproc=nproc, restarts=restarts, join_timeout=join_timeout,
                           is_host=(i == 0) if pin_host else None)
            self.agents.append(subprocess.Popen(cmd, cwd=cwd, env={**clean_env(fault), "SEAFL_TEST_NODES": self.mark},
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                start_new_session=True))

    def _ranks(self, agent: subprocess.Popen) -> dict[int, int]:
        """{rank process pid: its GROUP_RANK} of one agent's children now."""
        found = {}
        kids = subprocess.run(["pgrep", "-P", str(agent.pid)], capture_output=True, text=True).stdout.split()
        for pid in map(int, kids):
            env = _environ(pid)
            if b"GROUP_RANK" in env:
                found[pid] = int(env[b"GROUP_RANK"])
        return found

    def node(self, group_rank: int, wait_s: float = 60.0) -> tuple[subprocess.Popen, list[int]]:
        """(the agent, its rank pids) of node ``group_rank``."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for agent in self.agents:
                ranks = self._ranks(agent)
                if len(ranks) == self.nproc and set(ranks.values()) == {group_rank}:
                    return agent, sorted(ranks)
            time.sleep(0.2)
        raise AssertionError(f"no agent started the ranks of node {group_rank} within {wait_s:.0f}s")

    def lose(self, group_rank: int) -> subprocess.Popen:
        """Node ``group_rank`` lost: its agent and its ranks SIGKILLed at once."""
        agent, ranks = self.node(group_rank)
        for pid in (agent.pid, *ranks):
            os.kill(pid, signal.SIGKILL)
        agent.communicate()
        return agent

    def wait(self, agent: subprocess.Popen, timeout: float) -> tuple[int, str]:
        """(exit code, stderr) of one agent."""
        _, err = agent.communicate(timeout=timeout)
        return agent.returncode, err

    def wait_all(self, timeout: float = 240) -> list[tuple[int, str]]:
        deadline = time.monotonic() + timeout
        return [self.wait(a, max(1.0, deadline - time.monotonic())) for a in self.agents]

    def kill_all(self) -> None:
        """SIGKILL every process of this job still alive (by its mark), then reap the agents."""
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if _environ(pid).get(b"SEAFL_TEST_NODES") == self.mark.encode() and pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for agent in self.agents:
            agent.communicate()


def _environ(pid: int) -> dict[bytes, bytes]:
    """A process's environment ({} once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(v.split(b"=", 1) for v in raw.split(b"\0") if b"=" in v)
