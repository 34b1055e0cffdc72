"""FedCompass's schedule (Li et al., ICLR 2024) as a pure generator of events (docs/algorithms.md, "FedCompass").

The server estimates each client's time per local step from the virtual times of its earlier jobs, assigns each
new job a number of local steps Q in [Q_min, Q_max] so that clients arrive together in *groups*, and aggregates a
group when its last member arrives or at its deadline, whichever comes first. Cross-silo: every one of the N devices
trains (M = N). Nothing here reads a trained value, so the schedule is a pure function of the config: resume's
replay recomputes it and nothing of it is checkpointed. The algorithm is APPFL's ``CompassScheduler`` (the
authors' reference code) with its wall clock replaced by the virtual one and its timers by deadline events:

- **Speed.** When device k's job of Q steps that started at s arrives at t, the observed time per step is
  (t − s)/Q (download, compute, idle and upload all count). The estimate v_k is that value after k's first job,
  then v_k ← (1 − m)·v_k + m·(t − s)/Q with the speed momentum m (0.9: the new observation weighs 0.9).
- **The first job** of every device starts at time 0 with Q_max steps and is aggregated alone when it arrives
  (trigger ``single``), as the reference code's first arrival is.
- **Assigning a group** to device k at time t (after its update is taken): with no group waiting, a new group of
  Q_max steps. Else k *joins* the group g whose expected arrival T_g gives the most steps q = ⌊(T_g − t)/v_k⌋ with
  Q_min <= q <= Q_max (ties: the later group). If none fits, k *creates* a group: for every group whose deadline
  L_g is still ahead, q_g = ⌊(L_g + Q_max·min_{j∈g} v_j − t)/v_k⌋, kept when q_g <= Q_max; Q is the largest kept
  q_g, raised to Q_min if below it, or Q_max if none is kept. The new group has T = t + Q·v_k and deadline
  L = t + Q·v_k·λ (λ the latest-time factor, 1.5).
- **Arrivals.** A member arriving at or before its group's deadline waits (idle) for the group's aggregation. A
  member arriving after it (its group was aggregated at the deadline without it) is *late*: its update goes to the
  general buffer, which the next group aggregation takes as well, and it starts a new job at once from the current
  model.
- **Aggregation** of group g (trigger ``arrival``: its last member arrived; ``deadline``: its deadline passed with
  members missing and at least one arrived) takes the general buffer, then g's arrived members in arrival order,
  bumps the version, and starts every arrived member's next job, assigning groups fastest first (least v_k; ties:
  lower device id). A deadline at which no member had arrived aggregates nothing.

Events at one instant: finishes first (lower device id first), then deadlines (lower group id first). A
step-counted job's place on the clock is :func:`step_ends`. Events: ``start`` (with ``steps`` and ``group``),
``group`` (a group created: its ``expected`` T and ``deadline`` L), ``finish`` (with ``steps``, ``group`` and
``late``), ``deadline`` (a group's deadline passed with members missing), ``aggregate`` (with ``trigger`` and
``group``; each update with its ``steps``).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

from seafl_dist.sim.clock import SpeedModel
from seafl_dist.sim.jobs import Job

# epoch_times(device, device_job_index, passes) -> the c_k + z_k of each of the job's first ``passes`` epochs
EpochTimes = Callable[[int, int, int], list]


def step_ends(start: float, download_s: float, epoch_times: Sequence[float], steps_per_epoch: int,
              steps: int) -> list[float]:
    """The ends [b_1..b_P] of a job of ``steps`` local steps on a device whose epoch (``steps_per_epoch`` steps)
    lasts c_k + z_e: P = ⌈steps / steps_per_epoch⌉ passes over the data, pass e holding q_e steps (a whole epoch's
    but the last), b_0 = start + download_s and b_e = b_{e−1} + (q_e / steps_per_epoch)·(c_k + z_e). So a step takes
    (c_k + z_e)/steps_per_epoch: the idle time of an epoch is spread over its steps, and a partial last pass idles
    its share. ``epoch_times`` holds at least P values."""
    if steps < 1 or steps_per_epoch < 1:
        raise ValueError(f"need steps >= 1 ({steps}) and steps_per_epoch >= 1 ({steps_per_epoch})")
    passes = -(-steps // steps_per_epoch)
    b, ends = start + download_s, []
    for e in range(passes):
        q = min(steps_per_epoch, steps - e * steps_per_epoch)
        b = b + (q / steps_per_epoch) * epoch_times[e]
        ends.append(b)
    return ends


@dataclass
class Group:
    id: int
    expected: float  # T_g
    deadline: float  # L_g
    pending: list = field(default_factory=list)  # devices of the group still training
    arrived: list = field(default_factory=list)  # their jobs, in arrival order
    done: bool = False  # aggregated, or its deadline passed: nobody joins it and later arrivals are late


@dataclass(kw_only=True)
class CompassScheduler:
    num_devices: int  # N = M: every device trains
    epoch_times: EpochTimes
    steps_per_epoch: Sequence[int]  # s_k: local steps of one epoch over device k's shard
    q_min: int = 20
    q_max: int = 100
    speed_momentum: float = 0.9
    latest_time_factor: float = 1.5
    comm: Optional[Callable[[int], tuple]] = None  # device -> (download_s, upload_s); None: the constants
    download_s: float = 0.0
    upload_s: float = 0.0
    n_samples: Sequence[int] = ()
    max_aggregations: Optional[int] = None
    max_time: Optional[float] = None
    upload_sizes: dict = field(default_factory=dict)  # as Scheduler's: on every finish event
    speed: dict = field(default_factory=dict, init=False)  # device -> v_k (seconds per step)
    _next_group: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.q_min <= self.q_max:
            raise ValueError(f"need 1 <= q_min ({self.q_min}) <= q_max ({self.q_max})")
        if not 0 < self.speed_momentum <= 1 or not self.latest_time_factor >= 1:
            raise ValueError(f"need speed_momentum in (0, 1] ({self.speed_momentum}) and latest_time_factor >= 1 "
                             f"({self.latest_time_factor})")
        if len(self.steps_per_epoch) != self.num_devices:
            raise ValueError(f"steps_per_epoch has {len(self.steps_per_epoch)} entries for {self.num_devices} devices")
        if not self.n_samples:
            self.n_samples = [0] * self.num_devices

    # ---- the clock ----------------------------------------------------------------------------
    def _comm(self, device: int) -> tuple:
        return self.comm(device) if self.comm is not None else (self.download_s, self.upload_s)

    def _job(self, job_id: int, device: int, version: int, start: float, steps: int, job_index: int) -> Job:
        s = int(self.steps_per_epoch[device])
        down, up = self._comm(device)
        ends = step_ends(start, down, self.epoch_times(device, job_index, -(-steps // s)), s, steps)
        job = Job(job=job_id, device=device, version=version, start=start, epoch_ends=ends, upload_s=up, steps=steps)
        if not job.finish > start:
            raise ValueError(f"device {device}'s job of {steps} steps takes no virtual time; FedCompass estimates "
                             f"speeds from job times (give clock.sec_per_sample > 0)")
        return job

    # ---- the reference code's group assignment -----------------------------------------------
    def assign(self, device: int, now: float, groups: dict) -> tuple[int, int, Optional[Group]]:
        """(group id, steps, the new group or None when joining) for ``device``'s next job at ``now``."""
        v = self.speed[device]
        live = [g for g in groups.values() if not g.done]
        best, chosen = -1, None
        for g in live:  # join: the most steps that still fit [Q_min, Q_max]
            q = math.floor((g.expected - now) / v)
            if q < self.q_min or q < best or q > self.q_max:
                continue
            best, chosen = q, g
        if chosen is not None:
            chosen.pending.append(device)
            return chosen.id, best, None
        steps = -1
        for g in live:  # create: arrive just after the fastest member of a group could finish another Q_max
            if now < g.deadline:
                fastest = min(self.speed[d] for d in g.pending + [j.device for j in g.arrived])
                q = math.floor((g.deadline + fastest * self.q_max - now) / v)
                if q <= self.q_max:
                    steps = max(steps, q)
        if 0 <= steps < self.q_min:
            steps = self.q_min
        if steps < 0:
            steps = self.q_max
        gid = self._next_group
        self._next_group = gid + 1
        group = Group(id=gid, expected=now + steps * v, deadline=now + steps * v * self.latest_time_factor,
                      pending=[device])
        groups[gid] = group
        return gid, steps, group

    def _observe(self, job: Job, now: float) -> None:
        """v_k from the job's virtual span: the first observation, then the momentum average."""
        obs = (now - job.start) / job.steps
        old = self.speed.get(job.device)
        self.speed[job.device] = obs if old is None else (1 - self.speed_momentum) * old + self.speed_momentum * obs

    # ---- the loop --------------------------------------------------------------------------------
    def events(self) -> Iterator[dict]:
        """Yield start / group / finish / deadline / aggregate events in virtual-time order."""
        self._next_group, self.speed = 0, {}
        groups: dict[int, Group] = {}
        member: dict[int, Optional[int]] = {}  # device -> the group of its job in flight (None: its first job)
        device_jobs = [0] * self.num_devices
        heap: list = []
        state = {"version": 0, "next_id": 0}
        general: list[Job] = []

        def start(device: int, now: float, steps: int, gid: Optional[int]) -> dict:
            job = self._job(state["next_id"], device, state["version"], now, steps, device_jobs[device])
            state["next_id"] += 1
            device_jobs[device] += 1
            member[device] = gid
            heapq.heappush(heap, (job.finish, 0, device, job))
            return {"event": "start", "time": now, "device": device, "job": job.job, "version": job.version,
                    "epoch_ends": list(job.epoch_ends), "steps": steps, "group": gid}

        def restart(device: int, now: float) -> Iterator[dict]:
            gid, steps, new = self.assign(device, now, groups)
            if new is not None:
                heapq.heappush(heap, (new.deadline, 1, gid, None))
                yield {"event": "group", "time": now, "group": gid, "expected": new.expected,
                       "deadline": new.deadline}
            yield start(device, now, steps, gid)

        def aggregate(jobs: list, now: float, trigger: str, gid: Optional[int]) -> dict:
            v = state["version"]
            state["version"] = v + 1
            return {"event": "aggregate", "time": now, "version": v + 1, "trigger": trigger, "group": gid,
                    "updates": [{"device": j.device, "job": j.job, "staleness": v - j.version, "base_version": j.version,
                                 "n_samples": int(self.n_samples[j.device]), "epochs": j.epochs, "steps": j.steps}
                                for j in jobs]}

        def close(g: Group, now: float, trigger: str) -> Iterator[dict]:
            g.done = True
            if not g.pending:
                del groups[g.id]
            if not g.arrived:
                return
            taken = general + g.arrived
            general.clear()
            yield aggregate(taken, now, trigger, g.id)
            for d in sorted((j.device for j in g.arrived), key=lambda d: (self.speed[d], d)):
                yield from restart(d, now)

        for d in range(self.num_devices):
            yield start(d, 0.0, self.q_max, None)
        while heap and (self.max_aggregations is None or state["version"] < self.max_aggregations):
            now, kind, key, job = heapq.heappop(heap)
            if self.max_time is not None and now > self.max_time:
                return
            if kind == 1:  # a group's deadline
                g = groups.get(key)
                if g is not None and not g.done:
                    yield {"event": "deadline", "time": now, "group": key}
                    yield from close(g, now, "deadline")
                continue
            device, gid = job.device, member[job.device]
            g = groups.get(gid) if gid is not None else None
            late = gid is not None and (g is None or g.done)
            yield {"event": "finish", "time": now, "device": device, "job": job.job, "epochs": job.epochs,
                   "steps": job.steps, "group": gid, "late": late, **self.upload_sizes}
            self._observe(job, now)
            if gid is None:  # the first job: aggregated alone
                yield aggregate([job], now, "single", None)
                yield from restart(device, now)
            elif late:
                if g is not None:
                    g.pending.remove(device)
                    if not g.pending:
                        del groups[gid]
                general.append(job)
                yield from restart(device, now)
            else:
                g.pending.remove(device)
                g.arrived.append(job)
                if not g.pending:
                    yield from close(g, now, "arrival")


def from_config(cfg, n_samples: Sequence[int], steps_per_epoch: Sequence[int], *, upload_s: float,
                upload_sizes: dict) -> CompassScheduler:
    """The run's schedule (runtime/setup.py): device k's epoch lasts c_k + z_k as SPEC's clock has it (``clock``:
    c_k = n_k × sec_per_sample, its idle draws per device or per epoch from the same named streams), its
    steps per epoch ``steps_per_epoch[k]`` (the trailing-batch rule applied: train/plan.py), the constant download
    and ``upload_s`` (``clock.upload_s``, scaled to a codec's bytes by the caller)."""
    fc = cfg.algorithm.fedcompass
    speed = SpeedModel(cfg.clock, n_samples, cfg.run.seed, -(-fc.q_max // max(1, min(steps_per_epoch))))

    def epoch_times(device: int, job_index: int, passes: int) -> list:
        c = speed.compute_time(device)
        return [c + z for z in speed.idle_times(device, job_index)[:passes]]

    return CompassScheduler(num_devices=len(n_samples), epoch_times=epoch_times, steps_per_epoch=steps_per_epoch,
                            q_min=fc.q_min, q_max=fc.q_max, speed_momentum=fc.speed_momentum,
                            latest_time_factor=fc.latest_time_factor, download_s=cfg.clock.download_s,
                            upload_s=upload_s, n_samples=n_samples, max_aggregations=cfg.run.max_aggregations,
                            max_time=cfg.run.max_time, upload_sizes=upload_sizes)
