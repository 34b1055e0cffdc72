"""The server loop with availability and dropouts (SPEC "Device populations"), event by event.

:class:`~seafl_dist.sim.scheduler.Scheduler` runs this loop when a population (``availability``)
or ``dropout`` is set. The rules, in the words of docs/devices.md:

- **Slots.** After time 0 and after every aggregation M − (jobs in flight) slots are owed; a
  drop owes one more. A *refill* (time 0, an aggregation, a drop) fills owed slots from the
  devices idle and online at that instant: if there are more than owed slots, the slots draw
  from stream ("select", version, refill sequence) — the sequence counts the refills that drew
  at this version — uniformly without replacement; otherwise all of them start. Slots still owed
  *wait*: the first devices to become idle and online later (by coming online, or by finishing
  while online) fill them in time order, ties lower device id.
- **Drops.** A job starting at s on device k drops at the close of the window holding s if its
  upload lands after it (landing exactly at the close counts as landed). With ``dropout = p``
  it draws (u, v) from stream ("dropout", k, k's job index) and, if u < p, drops at
  s + v·(planned finish − s) when that comes first. A SEAFL²-notified job whose new finish is
  not after its drop point lands. A dropped job leaves flight at its drop time (it blocks
  nothing and is never notified); if the buffer then holds >= K and nothing blocks, the server
  aggregates at the drop time, and then refills.
- **Order at one instant.** Finishes and drops at the same time go in increasing device id
  (a device has one job at a time); slots waiting for devices that come online at that time
  are filled after them.
- **Stall.** With nothing in flight and no idle device ever online again, after
  max(1000, 100·M) jobs in a row dropped without one landing (K out of reach in practice: at
  dropout 0.9 that run has probability 0.9^1000 ≈ 1e-46), or (told by the caller) no job able to
  land at all, the stream ends with ``{"event": "stall", "time", "reason"}``.

Every start event also carries the job's own ``download_s`` and ``upload_s``. The stop rules
(``max_aggregations``, ``max_time``) are those of the plain loop.
"""
from __future__ import annotations

import heapq
import math
from typing import Iterator

import numpy as np

from seafl_dist.sim.jobs import Job
from seafl_dist.sim.rng import stream


class AlwaysOnline:
    """The availability of a run without a profile: every device, at every time (one residue class)."""

    perm = np.zeros(1, dtype=np.int64)

    def __init__(self, num_devices: int):
        self.num_devices = num_devices

    def window_end(self, device: int, t: float) -> float:
        return math.inf

    def residue_online(self, t: float) -> np.ndarray:
        return np.ones(1, dtype=bool)

    def residue_next_online(self, t: float) -> np.ndarray:
        return np.full(1, t)


class Idle:
    """The devices idle and online at one instant, ordered by id, without listing all N of them.

    Device k is online iff its residue r = k mod P is (``online[r]``), so the j-th online device is
    found from a prefix sum over the P residues, and the ≤ M busy ones are stepped over: O(P + M log M)
    to build, O(log P + log M) per device asked for. ``take(i)`` gives the i-th idle online devices
    (0-based, increasing id): exactly ``eligible(t, busy)[i]`` of the whole-population scan."""

    def __init__(self, online: np.ndarray, num_devices: int, busy: list):
        self.P, self.N = len(online), num_devices
        self.cum = np.cumsum(online, dtype=np.int64)  # online residues in [0, r]
        per = int(self.cum[-1])
        full, rest = divmod(num_devices, self.P)
        self.per = per
        n_online = full * per + (int(self.cum[rest - 1]) if rest else 0)
        b = np.asarray(busy, dtype=np.int64)
        b = np.sort(b[online[b % self.P]]) if len(b) else b
        # each busy online device's rank among the online devices, minus how many busy ones precede it
        ranks = (b // self.P) * per + np.where(b % self.P > 0, self.cum[(b % self.P) - 1], 0)
        self.skip = ranks - np.arange(len(b))
        self.count = n_online - len(b)

    def take(self, i: np.ndarray) -> np.ndarray:
        i = np.asarray(i, dtype=np.int64)
        j = i + np.searchsorted(self.skip, i, side="right")  # the rank among online devices, busy stepped over
        q, rem = np.divmod(j, self.per) if self.per else (j, j)
        return q * self.P + np.searchsorted(self.cum, rem + 1)


class ChurnLoop:
    def __init__(self, sched):
        self.s = sched
        self.avail = sched.availability if sched.availability is not None else AlwaysOnline(sched.num_devices)
        self.version, self.next_id, self.owed, self.refills = 0, 0, 0, 0
        self.in_flight: dict[int, Job] = {}
        self.heap: list = []  # (time, device, job): its finish or drop
        self.buffer: list[Job] = []
        self.dry = 0  # jobs dropped since the last one landed
        self.dry_limit = max(1000, 100 * sched.concurrency)

    # ---- starting jobs ------------------------------------------------------------------
    def _comm(self, device: int) -> tuple:
        s = self.s
        return s.comm(device) if s.comm is not None else (s.download_s, s.upload_s)

    def _start(self, device: int, now: float) -> dict:
        s = self.s
        index = s._device_jobs[device]
        s._device_jobs[device] += 1
        s.count(device, +1)
        down, up = self._comm(device)
        job = Job(job=self.next_id, device=device, version=self.version, start=now,
                  epoch_ends=list(s.plan(device, index, now)), upload_s=up, download_s=down)
        self.next_id += 1
        close = self.avail.window_end(device, now)
        if close < job.finish:
            job.drop_at, job.drop_cause = close, "offline"
        if s.dropout is not None:
            u, v = stream(s.seed, "dropout", device, index).random(2)
            point = now + float(v) * (job.finish - now)
            if u < s.dropout and point < job.drop_at:
                job.drop_at, job.drop_cause = point, "dropout"
        self.in_flight[job.job] = job
        heapq.heappush(self.heap, (job.ends_at, device, job.job))
        return {"event": "start", "time": now, "device": device, "job": job.job, "version": job.version,
                "epoch_ends": list(job.epoch_ends), "download_s": down, "upload_s": up}

    def _fill(self, now: float, draw: bool) -> list[dict]:
        """Start jobs in owed slots: a refill draws when devices outnumber slots; a wait takes the lowest ids."""
        if self.owed <= 0:
            return []
        idle = Idle(self.avail.residue_online(now), self.s.num_devices,
                    self.s.unavailable([j.device for j in self.in_flight.values()]))
        if idle.count <= self.owed:
            chosen = idle.take(np.arange(idle.count))
        elif draw:  # choice(pool, k) is pool[choice(len(pool), k)]: the pool itself is never listed
            rng = stream(self.s.seed, "select", self.version, self.refills)
            chosen = np.sort(idle.take(rng.choice(idle.count, size=self.owed, replace=False)))
        else:
            chosen = idle.take(np.arange(self.owed))
        if draw:
            self.refills += 1
        self.owed -= len(chosen)
        return [self._start(int(d), now) for d in chosen]

    # ---- what a finish or a drop leads to -----------------------------------------------
    def _blockers(self) -> list[Job]:
        return sorted((j for j in self.in_flight.values() if self.s._blocks(j, self.version)), key=lambda j: j.device)

    def _aggregate(self, now: float) -> Iterator[dict]:
        s = self.s
        yield {"event": "aggregate", "time": now, "version": self.version + 1, "updates": [
            {"device": j.device, "job": j.job, "staleness": self.version - j.version, "base_version": j.version,
             "n_samples": int(s.n_samples[j.device]), "epochs": j.epochs} for j in self.buffer]}
        self.version, self.buffer, self.refills = self.version + 1, [], 0
        self.owed = s.concurrency - len(self.in_flight)
        yield from self._fill(now, draw=True)

    def _notify(self, now: float, blockers: list[Job]) -> Iterator[dict]:
        for j in blockers:
            if j.notified:
                continue
            old = j.ends_at
            j.notify(now)
            if j.ends_at != old:
                heapq.heappush(self.heap, (j.ends_at, j.device, j.job))
            yield {"event": "notify", "time": now, "device": j.device, "job": j.job, "epochs": j.epochs}

    def _leave(self, job: Job) -> None:
        del self.in_flight[job.job]

    def _on_finish(self, job: Job) -> Iterator[dict]:
        now = job.finish
        self._leave(job)
        self.dry = 0
        self.buffer.append(job)
        yield {"event": "finish", "time": now, "device": job.device, "job": job.job, "epochs": job.epochs,
               **self.s.upload_sizes}
        if len(self.buffer) >= self.s.buffer_size:
            blockers = self._blockers()
            if not blockers:
                yield from self._aggregate(now)
                return
            if self.s.partial:
                yield from self._notify(now, blockers)
        yield from self._fill(now, draw=False)  # slots waiting: this device is free now

    def _on_drop(self, job: Job) -> Iterator[dict]:
        now = job.drop_at
        self._leave(job)
        self.s.count(job.device, -1)
        self.dry += 1
        self.owed += 1
        yield {"event": "drop", "time": now, "device": job.device, "job": job.job, "cause": job.drop_cause}
        if len(self.buffer) >= self.s.buffer_size and not self._blockers():
            yield from self._aggregate(now)  # the last blocker dropped
        else:
            yield from self._fill(now, draw=True)

    def _next_wake(self, t: float) -> float:
        """The first time >= t a device not busy now is online: per residue, those with an idle device."""
        nxt = self.avail.residue_next_online(t)
        P, n = len(nxt), self.s.num_devices
        size = n // P + (np.arange(P) < n % P)  # devices per residue
        out = self.s.unavailable([j.device for j in self.in_flight.values()])  # busy, or retired by the cap
        busy = np.bincount(np.asarray(out, dtype=np.int64) % P, minlength=P)
        free = nxt[size > busy]
        return float(free.min()) if len(free) else math.inf

    # ---- the loop -----------------------------------------------------------------------
    def _next_job(self):
        """The job whose finish or drop comes next (stale heap entries of notified jobs skipped)."""
        while self.heap:
            t, _, job_id = self.heap[0]
            job = self.in_flight.get(job_id)
            if job is not None and job.ends_at == t:
                return job
            heapq.heappop(self.heap)
        return None

    def events(self) -> Iterator[dict]:
        s = self.s
        if s.stall_reason:
            yield {"event": "stall", "time": 0.0, "reason": s.stall_reason}
            return
        now = 0.0
        self.owed = s.concurrency
        yield from self._fill(now, draw=True)
        while s.max_aggregations is None or self.version < s.max_aggregations:
            job = self._next_job()
            t_job = job.ends_at if job is not None else math.inf
            wake = self._next_wake(now) if self.owed > 0 else math.inf
            if math.isinf(t_job) and math.isinf(wake):
                yield {"event": "stall", "time": now, "reason": (
                    f"no device can come online again after t={now:g}s: nothing in flight, {len(self.buffer)} "
                    f"update(s) in the buffer (K = {s.buffer_size}), {self.owed} slot(s) waiting{s.cap_note()}")}
                return
            now = min(t_job, wake)
            if s.max_time is not None and now > s.max_time:
                return
            if wake < t_job:  # devices come online while slots wait
                started = self._fill(now, draw=False)
                if not started:  # next_wake and eligible disagree: a bug, not a schedule to emit
                    raise RuntimeError(f"a device was due online at t={now!r} but none is eligible then")
                yield from started
                continue
            heapq.heappop(self.heap)
            yield from (self._on_drop(job) if job.drops else self._on_finish(job))
            if self.dry >= self.dry_limit:
                yield {"event": "stall", "time": now, "reason": (
                    f"no job has landed in the last {self.dry} jobs (all dropped) by t={now:g}s; the windows are too "
                    f"short for the jobs or devices.dropout too high")}
                return
