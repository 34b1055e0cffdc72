"""Heartbeats through the c10d store, so a dead, frozen or stuck rank is named instead of hanging.

Each rank bumps the counter ``seafl/hb/<rank>`` from a daemon thread every ``interval``
seconds (torch ops release the GIL, so a rank busy training still beats). A worker's beat also
publishes how far its main thread has got (``seafl/progress/<rank>``: messages handled plus
optimiser steps taken), which tells a rank that is alive but stuck from one that is busy with a
long job. A watcher notes, on its own clock, when each counter last moved; clocks of different
nodes are never compared.
"""
from __future__ import annotations

import threading
import time

# How long a waiting rank sleeps on its mailbox before it checks liveness. A message wakes it
# at once, so this only bounds how late a failure is noticed; a short poll would wake rank 0
# hundreds of times a second and preempt the workers it shares cores with.
POLL_S = 0.1


def _key(rank: int) -> str:
    return f"seafl/hb/{rank}"


def _progress_key(rank: int) -> str:
    return f"seafl/progress/{rank}"


class StepCounter:
    """How far a worker's main thread has got (messages handled, optimiser steps): it bumps the
    count, the heartbeat thread publishes it. (Not the progress bar: that is report.progress.)"""

    def __init__(self) -> None:
        self.count = 0

    def step(self) -> None:
        self.count += 1


class Heartbeat:
    def __init__(self, store, rank: int, interval: float = 1.0, progress: StepCounter | None = None):
        self.store, self.key, self.interval = store, _key(rank), interval
        self.progress, self.progress_key, self._published = progress, _progress_key(rank), 0
        self._stop = threading.Event()
        self.store.add(self.key, 1)
        self._thread = threading.Thread(target=self._beat, name="seafl-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.store.add(self.key, 1)
                if self.progress is not None and self.progress.count != self._published:
                    count = self.progress.count
                    self.store.add(self.progress_key, count - self._published)
                    self._published = count
            except Exception:  # the store is gone: the job is ending anyway
                return

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop beating, and wait for a beat in flight: a daemon thread that is still inside a
        store call when the interpreter exits aborts the process (SIGABRT, "terminate called
        without an active exception"), which would turn a finished run into a failed job."""
        self._stop.set()
        self._thread.join(timeout_s)


class Watcher:
    """``silent()`` lists (rank, seconds) for watched ranks whose heartbeat stopped;
    ``stalled(rank)`` is how long a rank's published progress has not moved."""

    def __init__(self, store, ranks, limit_s: float, check_every_s: float = 0.5):
        self.store, self.limit, self.every = store, limit_s, check_every_s
        now = time.monotonic()
        self._seen = {r: (None, now) for r in ranks}
        self._progress = {r: (None, now) for r in ranks}
        self._last_check = 0.0

    @staticmethod
    def _moved(table: dict, rank: int, value, now: float) -> None:
        if value != table[rank][0]:
            table[rank] = (value, now)

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._last_check < self.every:
            return
        self._last_check = now
        for r in self._seen:
            try:
                beat, progress = self.store.add(_key(r), 0), self.store.add(_progress_key(r), 0)
            except Exception:
                continue
            self._moved(self._seen, r, beat, now)
            self._moved(self._progress, r, progress, now)

    def stalled(self, rank: int) -> float:
        """Seconds since ``rank``'s progress counter last moved (or since watching began)."""
        self._refresh()
        return time.monotonic() - self._progress[rank][1]

    def silent(self, limit_s: float | None = None) -> list[tuple[int, float]]:
        self._refresh()
        limit = self.limit if limit_s is None else limit_s
        now = time.monotonic()
        return [(r, now - since) for r, (_, since) in sorted(self._seen.items()) if now - since > limit]
