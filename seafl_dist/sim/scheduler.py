"""The one server loop of every algorithm, as a pure generator of events (SPEC "The server loop").

The schedule (who trains, when each job ends, which updates each aggregation takes) depends
only on the config and the seed, never on the models, so it is computed here without any
tensor. The runtime consumes :meth:`Scheduler.events` and attaches models to the aggregate
events; one process and 64 ranks consume the same stream, hence the same trace.

Choices the SPEC leaves to us (written down here):
- Devices started together are started in increasing device id; job ids count up from 0.
- New devices after aggregation a (the new version t = a) are drawn from stream ("select", t);
  the initial M from stream ("select", 0) as well (version 0).
- ``max_time``: nothing that would happen after it is emitted (the run ends at the last
  event <= max_time). ``max_aggregations``: the stream ends after that many aggregations.
- A notified job uploads at the end of the epoch in progress: finish = b_e + upload_s,
  e >= 1 (a notification during download ends the job after epoch 1). A job notified while
  in its last epoch or during its upload keeps its finish time; the notify event is still
  emitted (a notification was sent).
- An aggregation takes the whole buffer.
- ``max_participation`` m (privacy's cap, docs/privacy.md): a device's *scheduled inclusions* are its
  jobs started minus its jobs dropped (each will be aggregated unless the run ends first). A device
  with m of them retires: it is never started again (a drop gives one back). The cap reads the
  schedule only, so it never depends on the models. Starts take the devices left; when they
  cannot fill a buffer any more, the stream ends with a ``stall`` event saying so (the run's
  status is then ``stalled``, its last aggregation the last full buffer).

With a device population (``availability``) or ``dropout`` set, starts also happen between
aggregations and jobs can drop: that loop lives in sim/churn.py and is documented there;
without them this module's loop runs alone and its output is what it always was.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from seafl_dist.sim.churn import ChurnLoop, Idle
from seafl_dist.sim.jobs import Job, PlanFn  # noqa: F401  (Job re-exported: seafl_dist.sim.scheduler.Job)
from seafl_dist.sim.rng import stream



@dataclass(kw_only=True)
class Scheduler:
    num_devices: int
    concurrency: int  # M
    buffer_size: int  # K
    staleness_limit: Optional[int]  # beta; None = infinity
    partial: bool  # SEAFL² notifications
    plan: PlanFn
    seed: int = 0
    upload_s: float = 0.0
    n_samples: Sequence[int] = ()
    max_aggregations: Optional[int] = None
    max_time: Optional[float] = None
    # device populations (SPEC "Device populations"); all unset: the loop below, byte for byte as before
    availability: Optional[object] = None  # a sim.population.Population (None: always online)
    dropout: Optional[float] = None  # p: a job drops with probability p at a uniform point of its span
    comm: Optional[Callable[[int], tuple]] = None  # device -> (download_s, upload_s); None: the constants
    download_s: float = 0.0  # what start events record when comm is None (plan includes it)
    stall_reason: Optional[str] = None  # known before the run (e.g. no job can fit any window): stall at 0
    # compression.codec: {"bytes": upload bytes, "model_bytes": the float32 model's} on every finish event; {}: none
    upload_sizes: dict = field(default_factory=dict)
    max_participation: Optional[int] = None  # privacy's cap m (see above); None: no cap
    _device_jobs: list = field(default_factory=list, init=False)
    _scheduled: dict = field(default_factory=dict, init=False)  # device -> scheduled inclusions (cap only)
    retired: set = field(default_factory=set, init=False)  # devices at the cap

    def __post_init__(self) -> None:
        if not 1 <= self.buffer_size <= self.concurrency <= self.num_devices:
            raise ValueError(f"need 1 <= K ({self.buffer_size}) <= M ({self.concurrency}) <= N ({self.num_devices})")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        self._device_jobs = [0] * self.num_devices
        if not self.n_samples:
            self.n_samples = [0] * self.num_devices
        if self.max_participation is not None and self.max_participation < 1:
            raise ValueError(f"max_participation must be >= 1, got {self.max_participation}")

    def count(self, device: int, step: int) -> None:
        """A job of ``device`` started (+1) or dropped (-1): its scheduled inclusions, and whether it is retired."""
        if self.max_participation is None:
            return
        n = self._scheduled.get(device, 0) + step
        self._scheduled[device] = n
        if n >= self.max_participation:
            self.retired.add(device)
        else:
            self.retired.discard(device)

    def unavailable(self, busy: list) -> list:
        """The devices no start may take: ``busy`` (those in flight), and those retired by the cap."""
        return sorted(self.retired.union(busy)) if self.retired else busy

    def cap_note(self) -> str:
        """Why the cap leaves too few devices, for a stall's reason ('' without retired devices)."""
        if not self.retired:
            return ""
        return (f"; {len(self.retired)} of {self.num_devices} devices reached privacy.max_participation = "
                f"{self.max_participation} and retired")

    def _blocks(self, job: Job, version: int) -> bool:
        beta = self.staleness_limit
        return beta is not None and version - job.version >= beta

    def _start_jobs(self, version: int, now: float, in_flight: dict, heap: list, next_id: int) -> list[Job]:
        # the free devices by rank, never listed: O(M log M), not O(N)
        free = Idle(np.ones(1, dtype=bool), self.num_devices, self.unavailable([j.device for j in in_flight.values()]))
        need = min(self.concurrency - len(in_flight), free.count)  # fewer only when the cap retired devices
        # choice(free ids, k) is free[choice(len, k)]: the same draws as when the list of free ids was built
        picked = free.take(stream(self.seed, "select", version).choice(free.count, size=need, replace=False))
        chosen = sorted(int(d) for d in picked)
        started = []
        for i, device in enumerate(chosen):
            ends = self.plan(device, self._device_jobs[device], now)
            self._device_jobs[device] += 1
            self.count(device, +1)
            job = Job(job=next_id + i, device=device, version=version, start=now, epoch_ends=list(ends),
                      upload_s=self.upload_s)
            in_flight[job.job] = job
            heapq.heappush(heap, (job.finish, job.device, job.job))
            started.append(job)
        return started

    @staticmethod
    def start_event(job: Job) -> dict:
        return {"event": "start", "time": job.start, "device": job.device, "job": job.job,
                "version": job.version, "epoch_ends": list(job.epoch_ends)}

    @property
    def churn(self) -> bool:
        """Availability or dropouts configured: starts and drops between aggregations (sim/churn.py)."""
        return self.availability is not None or self.dropout is not None

    def events(self) -> Iterator[dict]:
        """Yield start / notify / finish / aggregate events in virtual-time order (and, with churn,
        drop events and a last stall event if the run can make no more progress)."""
        if self.churn:
            yield from ChurnLoop(self).events()
            return
        version, in_flight, heap, buffer, now = 0, {}, [], [], 0.0
        started = self._start_jobs(0, 0.0, in_flight, heap, 0)
        next_id = len(started)
        yield from map(self.start_event, started)
        while in_flight and (self.max_aggregations is None or version < self.max_aggregations):
            finish, device, job_id = heapq.heappop(heap)
            job = in_flight.get(job_id)
            if job is None or job.finish != finish:  # stale heap entry of a notified job
                continue
            if self.max_time is not None and finish > self.max_time:
                return
            del in_flight[job_id]
            buffer.append(job)
            now = finish
            yield {"event": "finish", "time": finish, "device": device, "job": job_id, "epochs": job.epochs,
                   **self.upload_sizes}
            if len(buffer) < self.buffer_size:
                continue
            blockers = sorted((j for j in in_flight.values() if self._blocks(j, version)), key=lambda j: j.device)
            if blockers:
                if self.partial:
                    for j in blockers:
                        if not j.notified:
                            old = j.finish
                            j.notify(finish)
                            if j.finish != old:
                                heapq.heappush(heap, (j.finish, j.device, j.job))
                            yield {"event": "notify", "time": finish, "device": j.device, "job": j.job,
                                   "epochs": j.epochs}
                continue
            yield {"event": "aggregate", "time": finish, "version": version + 1, "updates": [
                {"device": j.device, "job": j.job, "staleness": version - j.version, "base_version": j.version,
                 "n_samples": int(self.n_samples[j.device]), "epochs": j.epochs} for j in buffer]}
            version, buffer = version + 1, []
            started = self._start_jobs(version, finish, in_flight, heap, next_id)
            next_id += len(started)
            yield from map(self.start_event, started)
        if not in_flight and (self.max_aggregations is None or version < self.max_aggregations):  # the cap's end
            yield {"event": "stall", "time": now, "reason": (
                f"too few devices left to fill a buffer: nothing in flight, {len(buffer)} update(s) in the buffer "
                f"(K = {self.buffer_size}){self.cap_note()}")}


class Lookahead:
    """Iterates a scheduler's events while letting the runtime peek ahead.

    ``final_epochs(job)`` answers how many epochs a job will really train, i.e. the epochs
    of its update in the aggregation that consumes it, or None if the job drops or the schedule
    ends before any aggregation takes it. The distributed runtime uses it to dispatch a job at its
    start with the exact epoch count, SEAFL² notifications included; peeking never
    changes what is iterated.
    """

    def __init__(self, events: Iterator[dict]):
        self._source = events
        self._queue: list[dict] = []
        self._head = 0
        self._epochs: dict[int, int] = {}
        self._finish: dict[int, float] = {}
        self._dropped: set = set()
        self._exhausted = False

    def _pull(self) -> bool:
        if self._exhausted:
            return False
        try:
            ev = next(self._source)
        except StopIteration:
            self._exhausted = True
            return False
        if ev["event"] == "aggregate":
            for u in ev["updates"]:
                self._epochs[u["job"]] = u["epochs"]
        elif ev["event"] == "finish":
            self._finish[ev["job"]] = ev["time"]
        elif ev["event"] == "drop":
            self._dropped.add(ev["job"])
        self._queue.append(ev)
        return True

    def final_epochs(self, job: int) -> Optional[int]:
        while job not in self._epochs and job not in self._dropped and self._pull():
            pass
        return self._epochs.get(job)

    def finish_time(self, job: int) -> Optional[float]:
        """The virtual time the job's update reaches the server (after SEAFL² notifications)."""
        self.final_epochs(job)
        return self._finish.get(job)

    def take_while(self, pred) -> list[dict]:
        """Consume and return the events at the head of the stream while ``pred`` holds."""
        out = []
        while (self._head < len(self._queue) or self._pull()) and pred(self._queue[self._head]):
            out.append(next(self))
        return out

    def __iter__(self) -> "Lookahead":
        return self

    def __next__(self) -> dict:
        if self._head >= len(self._queue) and not self._pull():
            raise StopIteration
        ev = self._queue[self._head]
        self._queue[self._head] = None  # let consumed events be freed
        self._head += 1
        if self._head > 4096 and self._head * 2 > len(self._queue):
            del self._queue[:self._head]
            self._head = 0
        return ev
