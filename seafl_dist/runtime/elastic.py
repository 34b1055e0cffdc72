"""Forming a torchrun attempt: one store, one decision, torchrun's restarts included.

Under ``torchrun --max-restarts=N`` a rank that dies makes torchrun stop the others and start
them all again, with the same ``MASTER_ADDR:MASTER_PORT``: the agent's c10d store outlives the
attempt. A process group formed straight on that store reads the dead attempt's addresses
(gloo's ``connectFullMesh ... Connection refused``), so every attempt forms its group on a
``PrefixStore`` of its own. Its name cannot be ``TORCHELASTIC_RESTART_COUNT``: each agent counts
only its own node's restarts, so on several nodes the counts differ. Instead rank 0 names the
attempt (a fresh token) and the other ranks join it with a handshake that no key left by an
earlier attempt can fool:

1. rank 0 publishes ``<run>/attempt`` = token, after the attempt's world size and decision;
2. a worker reads the token, writes its own nonce under it, waits (1 s) for rank 0's
   acknowledgement listing that nonce, and reads the token again if it is not there (a stale one);
3. rank 0 waits for W-1 nonces and acknowledges them with its decision: ``fresh``/``resume``
   (form the group on ``<run>/<token>/pg``), ``completed`` (nothing to do), ``error`` (the same
   one-line error on every rank) or ``interrupted``.

``<run>`` is ``seafl/run<n>`` for the n-th launch in this process, the same in every attempt, so
two runs in a row in one script never mix. Rank 0 decides alone (it owns the run dir; the other
ranks need not see it), and also agrees the run dir across attempts when none was given: the
first attempt's default (``runs/<name>-<timestamp>``) is kept in the agent's store.

A refusal is said once. A run that cannot start (another config's run in the dir, a checkpoint that cannot be
resumed, a run that does not fit on the disk, a dataset missing: a ConfigError or FileNotFoundError on any rank
of an attempt) would be refused again by every restart torchrun has left, so it marks ``<run>/refused`` in the
agent's store. Rank 0 of a later attempt that finds the mark decides ``refused``: every rank ends at once,
exit 2, without saying it again (:class:`Refused`), so the one line of the first attempt stands alone.

Interrupts stop the job, they are not turned into restarts. Every rank that stops on a signal
adds 1 to ``<run>/<token>/interrupted``. When rank 0 of a new attempt finds that every rank of the
previous attempt stopped that way, the job was interrupted (SIGTERM/SIGUSR1 from Slurm, Ctrl-C):
it ends the new attempt at once, status ``interrupted``, and marks it the same way, so torchrun's
remaining restarts end at once too. A lost rank (SIGKILL, a crash, an error) never marks itself,
so its attempt is restarted; the ranks torchrun stops with SIGTERM because of it do mark
themselves, but not all of them can.
"""
from __future__ import annotations

import datetime
import json
import os
import time
import uuid

import torch.distributed as dist

from seafl_dist.settings import ConfigError

_launches = 0  # launches started in this process: names each run's keys in the agent's store


def next_run_key() -> str:
    global _launches
    _launches += 1
    return f"seafl/run{_launches}"


def connect(rank: int, world_size: int, timeout_s: float):
    """A client of torchrun's agent store at MASTER_ADDR:MASTER_PORT (the same in every attempt).

    Without an agent (``TORCHELASTIC_USE_AGENT_STORE`` unset, e.g. ranks started by hand with
    MASTER_ADDR/MASTER_PORT) rank 0 hosts the store itself."""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500")),
                         world_size=None if agent else world_size, is_master=(rank == 0 and not agent),
                         timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


class Attempt:
    """This rank's view of the attempt: ``store`` (its own prefix), ``plan`` (rank 0's decision)."""

    def __init__(self, base, run_key: str, token: str, plan: dict):
        self.base, self.run_key, self.token, self.plan = base, run_key, token, plan
        self.store = dist.PrefixStore(f"{run_key}/{token}", base)

    def group_store(self):
        return dist.PrefixStore("pg", self.store)

    def mark_interrupted(self) -> None:
        """Count this rank as stopped by a signal (best effort: the agent may be gone already)."""
        try:
            self.base.set_timeout(datetime.timedelta(seconds=5))
            self.store.add("interrupted", 1)
        except Exception:
            pass


def agree_run_dir(base, run_key: str, proposed: str) -> str:
    """The run dir of this launch: the first attempt's proposal, kept in the agent's store."""
    return base.compare_set(f"{run_key}/run_dir", "", proposed).decode()


def previous_interrupted(base, run_key: str) -> bool:
    """Did every rank of the previous attempt of this launch stop on a signal?"""
    if not base.check([f"{run_key}/attempt"]):
        return False
    prev = base.get(f"{run_key}/attempt").decode()
    world = int(base.get(f"{run_key}/{prev}/world"))
    return base.add(f"{run_key}/{prev}/interrupted", 0) >= world


class Refused(ConfigError):
    """The run was refused by an earlier attempt of this launch, which said why; the CLI says nothing more."""
    said = True

    def __init__(self):
        super().__init__("refused by an earlier attempt of this torchrun job (its error above says why)")


def refused_before(base, run_key: str) -> bool:
    """Did an earlier attempt of this launch refuse the run (see the module's "said once")?"""
    return base.check([f"{run_key}/refused"])


def mark_refused(base, run_key: str) -> None:
    """Record that this launch's run is refused, so torchrun's restarts end at once (best effort)."""
    try:
        base.set(f"{run_key}/refused", "1")
    except Exception:  # noqa: BLE001 -- the agent's store may be gone; then so are the restarts
        pass


def said_before(text: str) -> bool:
    """Under torchrun's agent: has an earlier attempt of this job (or another rank of this one) said ``text``
    already? Counted in the agent's store, which outlives the attempts; a mistake found before any launch (a
    config error) is then said once per job, not once per restart. Without an agent store: False."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return False
    import hashlib
    try:
        store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500")),
                              is_master=False, timeout=datetime.timedelta(seconds=5), wait_for_workers=False)
        return store.add(f"seafl/said/{hashlib.sha256(text.encode()).hexdigest()[:16]}", 1) > 1
    except Exception:  # noqa: BLE001 -- no store to ask: say it
        return False


def lead(base, run_key: str, world_size: int, plan: dict) -> Attempt:
    """Rank 0: open a new attempt with ``plan``; returns once every worker has joined it."""
    token = uuid.uuid4().hex[:16]
    base.set(f"{run_key}/{token}/world", str(world_size))
    if plan["action"] == "interrupted":  # so that torchrun's next restart, if any, ends at once as well
        base.add(f"{run_key}/{token}/interrupted", world_size)
    base.set(f"{run_key}/attempt", token)
    keys = [f"{run_key}/{token}/join/{r}" for r in range(1, world_size)]
    base.wait(keys)
    nonces = [base.get(k).decode() for k in keys]
    base.set(f"{run_key}/{token}/ack", json.dumps({"nonces": nonces, "plan": plan}))
    return Attempt(base, run_key, token, plan)


def join(base, run_key: str, rank: int) -> Attempt:
    """A worker: join the attempt rank 0 opens (not an earlier one whose keys are still there)."""
    nonce = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    while True:
        token = base.get(f"{run_key}/attempt").decode()  # waits until the first attempt exists
        base.set(f"{run_key}/{token}/join/{rank}", nonce)
        try:
            base.wait([f"{run_key}/{token}/ack"], datetime.timedelta(seconds=1))
        except Exception:  # not acknowledged yet, or never will be: read the attempt again
            continue
        ack = json.loads(base.get(f"{run_key}/{token}/ack"))
        if nonce in ack["nonces"]:
            return Attempt(base, run_key, token, ack["plan"])
        time.sleep(0.1)  # an earlier attempt's acknowledgement: wait for rank 0 to open the new one


def end_group() -> None:
    """Destroy this rank's process groups; abort them if a transport thread still waits on a peer.

    A gloo receive cannot be cancelled (runtime/distributed.py's ``farewell`` ends them when it
    can). Aborting closes this rank's connections at once: such a wait then never returns, which
    is harmless, while a plain destroy keeps the connections open until the process ends, and a
    wait that returns while Python is finalizing aborts the process ("terminate called without
    an active exception")."""
    import threading
    waiting = any(t.name.startswith("seafl-recv") and t.is_alive() for t in threading.enumerate())
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    if waiting and abort is not None:
        abort()
    else:
        dist.destroy_process_group()
