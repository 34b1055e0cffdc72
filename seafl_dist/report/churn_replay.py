"""The trace checker's rules for runs with availability or dropouts (SPEC "Device populations").

:class:`ChurnReplay` keeps every rule of :class:`~seafl_dist.report.replay.Replay` that still holds
(job ids, versions, busy devices, epoch ends, finish times, notifications, blocking, what an
aggregation takes, staleness <= β) and replaces the two that churn changes, "starts come only at
time 0 or right after an aggregation" and "M in flight after them", by:

- slots: M − (in flight) are owed after time 0 and after every aggregation, one more after every
  drop; a block of starts at one instant starts exactly min(owed, idle devices online then)
  (with ``num_devices`` known; else at most the owed ones), never more than M in flight;
- while slots are owed, no idle device is online without being started (the next event comes
  no later than the first idle device's ``next_online``; needs ``num_devices``);
- a start is on a device online at that time, and a job lands no later than its window's close
  (both need the ``population``); start events carry their own ``download_s`` and ``upload_s``;
- a drop is of a job in flight, at its window's close (the window holding its start) before its
  upload would land, or, with dropout, inside its span [start, expected finish); from then on it
  blocks nothing; if the buffer then holds >= K and nothing blocks, an aggregation follows at
  the drop time;
- a ``stall`` event, if any, is the last one.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from seafl_dist.report.replay import REQUIRED, Replay, _close

CHURN_REQUIRED = {**REQUIRED, "start": REQUIRED["start"] + ("download_s", "upload_s"),
                  "drop": ("time", "device", "job"), "stall": ("time", "reason")}


class ChurnReplay(Replay):
    required = CHURN_REQUIRED

    def __init__(self, *, num_devices: Optional[int], population, dropout: Optional[float], **kw):
        super().__init__(**kw)
        self.N, self.pop, self.dropout = num_devices, population, dropout
        self.starting = False
        self.owed = self.M  # time 0
        self.block: Optional[dict] = None  # the starts at one instant: time, owed and pool before them
        self.last_time = 0.0
        self.stalled = False

    # ---- availability ------------------------------------------------------------------------
    def _busy(self) -> np.ndarray:
        busy = np.zeros(self.N, dtype=bool)
        busy[[r["device"] for r in self.in_flight.values() if 0 <= r["device"] < self.N]] = True
        return busy

    def _pool(self, t: float) -> Optional[int]:
        """How many devices are idle and online at t (None: unknown without num_devices)."""
        if self.N is None:
            return None
        if self.pop is None:
            return self.N - len(self.in_flight)
        return len(self.pop.eligible(t, self._busy()))

    def _wake(self, t: float) -> tuple:
        """(first time >= t an idle device is online, which device) with the current in-flight set."""
        if self.pop is None:
            return (t, None) if self.N - len(self.in_flight) > 0 else (math.inf, None)
        when, who = self.pop.next_wake(t, self._busy())
        return when, (int(who[0]) if len(who) else None)

    # ---- blocks of starts ----------------------------------------------------------------------
    def close_starts(self) -> None:
        b, self.block = self.block, None
        if b is None:
            return
        want = b["owed"] if b["pool"] is None else min(b["owed"], b["pool"])
        if b["started"] > b["owed"] or (b["pool"] is not None and b["started"] != want):
            pool = "" if b["pool"] is None else f" and {b['pool']} idle device(s) online"
            self.fail(f"{b['started']} job(s) start at t={b['time']} with {b['owed']} slot(s) free{pool}; "
                      f"expected {want}")
        self.owed = max(0, b["owed"] - b["started"])

    def end_starts(self) -> None:
        self.close_starts()

    def check_overdue(self, time: float) -> None:
        if self.block is not None and self.block["time"] != time:  # exact: JSON keeps every float's bits
            self.close_starts()  # a start at a later instant begins a new block
        super().check_overdue(time)
        if self.stalled:
            self.fail("an event follows the stall event")
        for rec in self.in_flight.values():
            if rec["window_end"] < time and not rec.get("offline_reported"):
                rec["offline_reported"] = True
                self.fail(f"job {rec['job']} (device {rec['device']}) is still in flight after its device went "
                          f"offline at {rec['window_end']}")
        if self.owed > 0 and time > self.last_time and self.N is not None and self.block is None:
            wake, who = self._wake(self.last_time)
            if wake < time:
                self.fail(f"{self.owed} slot(s) waited from t={self.last_time}, but idle device {who} was online "
                          f"at {wake} and did not start")
        self.last_time = max(self.last_time, time)

    # ---- events ------------------------------------------------------------------------------
    def start(self, ev: dict) -> None:
        t, device = ev["time"], ev["device"]
        if self.block is None:
            self.block = {"time": t, "owed": self.owed, "pool": self._pool(t), "started": 0}
        self.block["started"] += 1
        window_end = math.inf
        if self.pop is not None:
            if not 0 <= device < self.pop.num_devices or not self.pop.is_available(device, t):
                self.fail(f"job {ev['job']} starts on device {device}, which is offline at {t}")
            else:
                window_end = self.pop.window_end(device, t)
        rec = self.add_job(ev)
        if rec is not None:
            rec.update(upload_s=ev["upload_s"], start=t, window_end=window_end)

    def drop(self, ev: dict) -> None:
        job, t = ev["job"], ev["time"]
        rec = self.in_flight.pop(job, None)
        if rec is None:
            self.fail(f"job {job} drops but is not in flight")
            return
        if rec["device"] != ev["device"]:
            self.fail(f"drop names device {ev['device']}, job {job} runs on device {rec['device']}")
        fin = self.expected_finish(rec)
        at_close = _close(t, rec["window_end"])
        in_span = rec["start"] <= t and (fin is None or t < fin)
        if fin is not None and not t < fin:
            self.fail(f"job {job} drops at {t}, but its upload lands at {fin}, no later")
        elif not at_close and not (self.dropout != 0 and in_span):
            how = f"its window's close ({rec['window_end']})" if self.pop is not None else "a window's close"
            self.fail(f"job {job} drops at {t}, neither at {how} nor by dropout inside its span")
        self.owed += 1
        self.last_finish_time = t  # an aggregation may follow at the drop time
        if len(self.buffer) >= self.K and not any(self.blocks(r) for r in self.in_flight.values()):
            self.expect = ("aggregate",)

    def finish(self, ev: dict) -> None:
        rec = self.in_flight.get(ev["job"])
        if rec is not None and ev["time"] > rec["window_end"] and not _close(ev["time"], rec["window_end"]):
            self.fail(f"job {ev['job']} lands at {ev['time']}, after its device went offline at {rec['window_end']}")
        super().finish(ev)

    def aggregate(self, ev: dict) -> None:
        super().aggregate(ev)
        self.starting = False
        self.owed = self.M - len(self.in_flight)

    def stall(self, ev: dict) -> None:
        self.stalled = True
