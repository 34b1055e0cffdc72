"""Stopping a run cleanly: SIGTERM, SIGINT and SIGUSR1, and the fault-injection hook the tests use.

Every process of a run (the one process, each torchrun rank, each sweep child) calls
:func:`install`: the first of these signals raises ``KeyboardInterrupt`` wherever the process is
(training, waiting on a worker, evaluating). Rank 0's server then writes a checkpoint of the
last completed aggregation (never the half-done one: it keeps a snapshot of that consistent
state), flushes the run files, writes ``summary.json`` with status ``interrupted`` and exits
non-zero; a worker just exits. Later signals are ignored, so a second SIGTERM (SLURM and
torchrun both send more than one) cannot cut the checkpoint short. SIGUSR1 is what
``#SBATCH --signal=B:USR1@120`` sends before a job's time limit.

Testing hook (documented, not for production): ``SEAFL_FAULT=POINT:N[:SIGNAL]`` makes the
server send itself SIGNAL (default KILL) at POINT of aggregation N, after flushing the run
files, so tests can interrupt a run at an exact place without timing races:
- ``after_aggregate:N``: aggregation N is complete (and checkpointed, if one was due);
- ``during_aggregate:N``: aggregation N's event is written and its new jobs dispatched, its
  evaluation not yet done.
"""
from __future__ import annotations

import os
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
_stopping = False


def _interrupt(signum, _frame):
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt(f"received signal {signal.Signals(signum).name}")


def install() -> None:
    """Turn SIGTERM, SIGINT and SIGUSR1 into one KeyboardInterrupt (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _interrupt)


class Fault:
    """The ``SEAFL_FAULT`` hook: ``hit(point, version, writer)`` fires once, where asked."""

    POINTS = ("after_aggregate", "during_aggregate")

    def __init__(self, spec: str | None):
        self.point = None
        if not spec:
            return
        parts = spec.split(":")
        if len(parts) not in (2, 3) or parts[0] not in self.POINTS or not parts[1].isdigit():
            raise ValueError(f"SEAFL_FAULT={spec!r}: expected POINT:N[:SIGNAL] with POINT one of "
                             f"{', '.join(self.POINTS)} (e.g. after_aggregate:3 or during_aggregate:2:TERM)")
        self.point, self.version = parts[0], int(parts[1])
        name = parts[2].upper() if len(parts) == 3 else "KILL"
        self.signal = getattr(signal, name if name.startswith("SIG") else "SIG" + name)

    @classmethod
    def from_env(cls) -> "Fault":
        return cls(os.environ.get("SEAFL_FAULT"))

    def hit(self, point: str, version: int, writer) -> None:
        if self.point == point and self.version == version:
            self.point = None
            writer.flush()
            os.kill(os.getpid(), self.signal)
