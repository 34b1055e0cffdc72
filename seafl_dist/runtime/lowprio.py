"""Rank 0's evaluation at the lowest CPU priority, so it takes the cores the workers leave idle.

On a CPU machine every core trains (W = C + 1 ranks), and a FedAvg-style round ends at a barrier:
the aggregation needs every job of the round. Rank 0 hands out the next round's jobs and then
evaluates; at normal priority the evaluation takes CPU from one worker, which then finishes its
round late while the other waits (W1, issue 10: one LeNet-5 evaluation is about one job's CPU,
11 of them ~3.5 s of wall time on the critical path). At nice 19 the evaluation runs on a core
when its worker has finished its share of the round and waits for the other, and rank 0 still
waits for the result, so what is evaluated and written, and when in the trace, is unchanged.

Linux sets the priority of one thread (its native id); elsewhere :func:`lower_this_thread` does
nothing. The thread is a daemon: an interrupted run does not wait for an evaluation to end.
"""
from __future__ import annotations

import os
import queue
import threading


def lower_this_thread() -> bool:
    """Nice 19 for the calling thread only (Linux); False where that is not possible."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        return True
    except (AttributeError, OSError):
        return False


class LowPriority:
    """Runs ``fn(*args, **kwargs)`` on one nice-19 thread and waits for it: ``LowPriority()(fn, ...)``."""

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def _serve(self) -> None:
        lower_this_thread()
        while True:
            fn, args, kwargs, box, done = self._jobs.get()
            try:
                box.append((True, fn(*args, **kwargs)))
            except BaseException as err:  # handed back to the caller
                box.append((False, err))
            done.set()

    def __call__(self, fn, *args, **kwargs):
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="seafl-low-priority", daemon=True)
            self._thread.start()
        box, done = [], threading.Event()
        self._jobs.put((fn, args, kwargs, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value
