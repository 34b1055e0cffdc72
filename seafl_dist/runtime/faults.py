"""The ``SEAFL_FAULT`` test hook (documented, not for production): stop a run at an exact point.

    SEAFL_FAULT=POINT:N[:ACTION][@RANK][#ATTEMPT]

ACTION is a signal (``KILL``, the default, ``TERM``, ``USR1`` ...) or ``HANG`` (sleep until
killed); RANK is a rank or ``*`` (every rank, rank 0 last). Points:
- ``after_aggregate:N``: aggregation N is complete (and checkpointed, if one was due);
- ``during_aggregate:N``: aggregation N's event is written and its new jobs dispatched, its
  evaluation not yet done;
- ``before_group:0``: a torchrun rank about to form the process group (N is ignored).
The aggregation points fire on rank 0, after it flushed the run files; the signal goes to
``@RANK``'s process (default: rank 0 itself; another rank's pid comes from the c10d store, so
that rank must run on rank 0's node). ``before_group`` fires on ``@RANK`` itself. A hook fires
once, and only in torchrun's first attempt (``TORCHELASTIC_RESTART_COUNT`` 0 or unset), or in attempt ATTEMPT
when given (a soak that kills one rank in each of several restarts, tests/soak_driver.py): a restarted attempt
that passes the same point again goes on.

The runner builds the hook (:func:`from_env`) and hands it to the server, whose loop only calls
``hook.at(point, version, flush)``; without ``SEAFL_FAULT`` that is :data:`NO_FAULT`, which does nothing.
"""
from __future__ import annotations

import os
import signal
import time

POINTS = ("after_aggregate", "during_aggregate", "before_group")


class NoFault:
    def at(self, point: str, version: int = 0, flush=None) -> None:
        pass


NO_FAULT = NoFault()


class Fault(NoFault):
    """One armed point; ``at``'s ``flush()`` runs before it fires (the server flushes its run files)."""

    def __init__(self, spec: str, *, rank: int = 0, world: int = 1, pid_of=None):
        where, _, target = spec.partition("@")
        parts = where.split(":")
        if (len(parts) not in (2, 3) or parts[0] not in POINTS or not parts[1].isdigit()
                or (target and not target.isdigit() and target != "*")):
            raise ValueError(f"SEAFL_FAULT={spec!r}: expected POINT:N[:ACTION][@RANK] with POINT one of "
                             f"{', '.join(POINTS)} (e.g. after_aggregate:3, during_aggregate:2:TERM, "
                             f"after_aggregate:3:KILL@2, before_group:0:HANG@1)")
        self.point, self.version = parts[0], int(parts[1])
        self.target = "*" if target == "*" else int(target or 0)
        action = parts[2].upper() if len(parts) == 3 else "KILL"
        self.signal = None if action == "HANG" else getattr(signal, action if action.startswith("SIG") else "SIG" + action)
        self.rank, self.world, self.pid_of = rank, world, pid_of
        self.armed = True

    def at(self, point: str, version: int = 0, flush=None) -> None:
        if not self.armed or point != self.point or (point != "before_group" and version != self.version):
            return
        self.armed = False
        if flush is not None:
            flush()
        if self.signal is None:
            while True:
                time.sleep(3600)
        if self.point == "before_group":
            targets = [self.rank]
        else:
            targets = [*range(1, self.world), 0] if self.target == "*" else [self.target]
        for r in targets:
            os.kill(os.getpid() if r == self.rank else self.pid_of(r), self.signal)


def from_env(*, rank: int = 0, world: int = 1, pid_of=None, environ=None) -> NoFault:
    """The hook ``SEAFL_FAULT`` asks for on this rank, or :data:`NO_FAULT`."""
    environ = os.environ if environ is None else environ
    spec, _, attempt = (environ.get("SEAFL_FAULT") or "").partition("#")
    if not spec or environ.get("TORCHELASTIC_RESTART_COUNT", "0") != (attempt or "0"):
        return NO_FAULT
    fault = Fault(spec, rank=rank, world=world, pid_of=pid_of)
    # a before_group fault fires on its own rank; an aggregation point on rank 0, where the loop is
    if fault.point == "before_group":
        return fault if fault.target in ("*", rank) else NO_FAULT
    return fault if rank == 0 else NO_FAULT
