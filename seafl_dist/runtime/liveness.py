"""Heartbeats through the c10d store, so a dead or frozen rank is named instead of hanging.

Each rank bumps the counter ``seafl/hb/<rank>`` from a daemon thread every ``interval``
seconds (torch ops release the GIL, so a rank busy training still beats). A watcher notes,
on its own clock, when each counter last moved; clocks of different nodes are never compared.
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


class Heartbeat:
    def __init__(self, store, rank: int, interval: float = 1.0):
        self.store, self.key, self.interval = store, _key(rank), interval
        self._stop = threading.Event()
        self.store.add(self.key, 1)
        self._thread = threading.Thread(target=self._beat, name="seafl-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.store.add(self.key, 1)
            except Exception:  # the store is gone: the job is ending anyway
                return

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop beating, and wait for a beat in flight: a daemon thread that is still inside a
        store call when the interpreter exits aborts the process (SIGABRT, "terminate called
        without an active exception"), which would turn a finished run into a failed job."""
        self._stop.set()
        self._thread.join(timeout_s)


class Watcher:
    """``silent()`` lists (rank, seconds) for watched ranks whose heartbeat stopped."""

    def __init__(self, store, ranks, limit_s: float, check_every_s: float = 0.5):
        self.store, self.limit, self.every = store, limit_s, check_every_s
        now = time.monotonic()
        self._seen = {r: (None, now) for r in ranks}
        self._last_check = 0.0

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._last_check < self.every:
            return
        self._last_check = now
        for r, (value, since) in self._seen.items():
            try:
                v = self.store.add(_key(r), 0)
            except Exception:
                continue
            if v != value:
                self._seen[r] = (v, now)

    def silence(self, rank: int) -> float:
        self._refresh()
        return time.monotonic() - self._seen[rank][1]

    def silent(self, limit_s: float | None = None) -> list[tuple[int, float]]:
        self._refresh()
        limit = self.limit if limit_s is None else limit_s
        now = time.monotonic()
        return [(r, now - since) for r, (_, since) in sorted(self._seen.items()) if now - since > limit]
