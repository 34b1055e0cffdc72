"""The trace checker's rules for FedCompass runs (``algorithm.name: fedcompass``; docs/algorithms.md, "FedCompass").

An independent replay of the trace, written from the docs rather than from sim/compass.py: it re-derives each
device's time per step from the trace's own start and finish times, and checks

- a device's first job starts at time 0 with Q_max steps and no group, and is aggregated alone (``single``) when it
  lands; every other job has steps in [Q_min, Q_max] and belongs to a group that is still open;
- a job that joins a group already there has ⌊(T_g − t)/v_k⌋ steps; a job that creates one (its ``group`` event just
  before it) gives the group T = t + Q·v_k and L = t + Q·v_k·λ; group ids count up from 0;
- a finish lands at the job's last epoch end plus the upload, with the start's steps and group; ``late`` exactly when
  its group's deadline had passed or the group was aggregated without it;
- a ``deadline`` comes at its group's L while members are still training; an aggregation follows at once when some
  had arrived (``deadline``), or when a group's last member lands (``arrival``), taking the general buffer (the late
  updates) and then the group's arrivals in arrival order, with staleness t − t_k; the version rises by 1 each time.
"""
from __future__ import annotations

import math
from typing import Optional

from seafl_dist.report.replay import _close

REQUIRED = {"start": ("time", "device", "job", "version", "epoch_ends", "steps", "group"),
            "group": ("time", "group", "expected", "deadline"), "deadline": ("time", "group"),
            "finish": ("time", "device", "job", "epochs", "steps", "group", "late"),
            "aggregate": ("time", "version", "trigger", "group", "updates"), "eval": ("time", "version")}


class CompassReplay:
    def __init__(self, *, q_min: int, q_max: int, speed_momentum: float, latest_time_factor: float,
                 upload_s: Optional[float], limit: int = 100):
        self.q_min, self.q_max, self.m, self.lam = q_min, q_max, speed_momentum, latest_time_factor
        self.upload_s, self.limit = upload_s, limit
        self.problems: list[str] = []
        self.where, self.now, self.version = "", -math.inf, 0
        self.jobs: dict[int, dict] = {}  # job id -> its start event
        self.in_flight: dict[int, int] = {}  # device -> job
        self.speed: dict[int, float] = {}
        self.groups: dict[int, dict] = {}  # id -> {"expected", "deadline", "pending", "arrived", "done"}
        self.general: list[int] = []
        self.expect: Optional[tuple] = None  # (trigger, group, [job ids]) of the aggregation due next
        self.created: Optional[dict] = None  # the group event just read (its creator's start follows)

    def fail(self, msg: str) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(f"{self.where}: {msg}")

    def run(self, events) -> list[str]:
        for line, ev in enumerate(events, start=1):
            kind = ev.get("event") if isinstance(ev, dict) else None
            self.where = f"line {line} ({kind} t={ev.get('time') if isinstance(ev, dict) else '?'})"
            missing = [k for k in REQUIRED.get(kind, ()) if k not in ev]
            if kind not in REQUIRED or missing:
                self.fail(f"unknown event type {kind!r}" if kind not in REQUIRED else f"missing keys {missing}")
                continue
            if ev["time"] < self.now and not _close(ev["time"], self.now):
                self.fail(f"time goes back from {self.now}")
            self.now = max(self.now, ev["time"])
            if self.expect is not None and kind != "aggregate":
                self.fail(f"an aggregation ({self.expect[0]}, group {self.expect[1]}) was due before this event")
                self.expect = None
            if kind != "start" and self.created is not None:
                self.fail(f"group {self.created['group']} was created by no start")
            getattr(self, "on_" + kind)(ev)
            if kind == "start":
                self.created = None
        if self.expect is not None:
            self.fail(f"the trace ends before the aggregation ({self.expect[0]}) that was due")
        return self.problems

    def on_eval(self, ev: dict) -> None:
        if ev["version"] != self.version:
            self.fail(f"evaluates version {ev['version']}, the current one is {self.version}")

    def on_group(self, ev: dict) -> None:
        if ev["group"] != len(self.groups):
            self.fail(f"group id {ev['group']}; the next is {len(self.groups)}")
        if not _close(ev["deadline"] - ev["time"], self.lam * (ev["expected"] - ev["time"])):
            self.fail(f"deadline {ev['deadline']} is not λ = {self.lam} times the expected span after {ev['time']}")
        self.groups[ev["group"]] = {"expected": ev["expected"], "deadline": ev["deadline"], "pending": set(),
                                    "arrived": [], "done": False}
        self.created = ev

    def on_start(self, ev: dict) -> None:
        d, q, gid = ev["device"], ev["steps"], ev["group"]
        if d in self.in_flight:
            self.fail(f"device {d} already has job {self.in_flight[d]} in flight")
        if ev["version"] != self.version:
            self.fail(f"starts from version {ev['version']}, the current one is {self.version}")
        ends = ev["epoch_ends"]
        if not ends or any(b <= a for a, b in zip([ev["time"]] + ends, ends)):
            self.fail(f"epoch_ends {ends} do not rise after the start")
        self.jobs[ev["job"]], self.in_flight[d] = ev, ev["job"]
        if d not in self.speed:  # its first job
            if (ev["time"], q, gid) != (0.0, self.q_max, None):
                self.fail(f"device {d}'s first job is ({ev['time']}, {q} steps, group {gid}); due: (0, Q_max = "
                          f"{self.q_max}, null)")
            return
        g = self.groups.get(gid)
        if g is None or g["done"]:
            self.fail(f"joins group {gid}, which is not open")
            return
        if not self.q_min <= q <= self.q_max:
            self.fail(f"{q} steps, outside [{self.q_min}, {self.q_max}]")
        v = self.speed[d]
        if self.created is not None and self.created["group"] == gid:
            if not (_close(g["expected"], ev["time"] + q * v) and _close(g["deadline"], ev["time"] + q * v * self.lam)):
                self.fail(f"group {gid}'s T and L are not t + Q·v and t + Q·v·λ for Q = {q}, v = {v}")
        elif q != math.floor((g["expected"] - ev["time"]) / v):
            self.fail(f"joins group {gid} with {q} steps; ⌊(T − t)/v⌋ = {math.floor((g['expected'] - ev['time']) / v)}")
        g["pending"].add(d)

    def on_finish(self, ev: dict) -> None:
        d, job = ev["device"], ev["job"]
        st = self.jobs.get(job)
        if st is None or self.in_flight.get(d) != job:
            self.fail(f"job {job} of device {d} is not in flight")
            return
        del self.in_flight[d]
        if self.upload_s is not None and not _close(ev["time"], st["epoch_ends"][-1] + self.upload_s):
            self.fail(f"lands at {ev['time']}, not at its last epoch end + upload {st['epoch_ends'][-1] + self.upload_s}")
        if (ev["steps"], ev["group"], ev["epochs"]) != (st["steps"], st["group"], len(st["epoch_ends"])):
            self.fail(f"steps, group, epochs {ev['steps'], ev['group'], ev['epochs']} differ from its start's")
        obs = (ev["time"] - st["time"]) / st["steps"]
        self.speed[d] = obs if d not in self.speed else (1 - self.m) * self.speed[d] + self.m * obs
        gid = st["group"]
        if gid is None:
            if ev["late"]:
                self.fail("a first job is never late")
            self.expect = ("single", None, [job])
            return
        g = self.groups.get(gid)
        if g is None:  # its start named a group no group event created (said there): nothing to check it against
            self.fail(f"job {job} lands in group {gid}, which was never created")
            return
        g["pending"].discard(d)
        if ev["late"] != g["done"]:
            self.fail(f"late is {ev['late']}, but group {gid} is {'closed' if g['done'] else 'open'}")
        if g["done"]:
            self.general.append(job)
        else:
            g["arrived"].append(job)
            if not g["pending"]:
                self.close(gid, "arrival")

    def on_deadline(self, ev: dict) -> None:
        g = self.groups.get(ev["group"])
        if g is None or g["done"] or not g["pending"] or not _close(ev["time"], g["deadline"]):
            self.fail(f"group {ev['group']}'s deadline is no deadline passing with members still training")
            return
        self.close(ev["group"], "deadline")

    def close(self, gid: int, trigger: str) -> None:
        g = self.groups[gid]
        g["done"] = True
        if g["arrived"]:
            self.expect = (trigger, gid, self.general + g["arrived"])

    def on_aggregate(self, ev: dict) -> None:
        if self.expect is None:
            self.fail("no aggregation was due")
            return
        trigger, gid, jobs = self.expect
        self.expect = None
        got = [u.get("job") for u in ev["updates"]]
        if (ev["trigger"], ev["group"], got) != (trigger, gid, jobs):
            self.fail(f"aggregates {ev['trigger'], ev['group'], got}; due: {trigger, gid, jobs}")
        if ev["version"] != self.version + 1:
            self.fail(f"version {ev['version']}, not {self.version + 1}")
        for u in ev["updates"]:
            st = self.jobs.get(u.get("job"), {})
            if u.get("staleness") != self.version - st.get("version", -1) or u.get("steps") != st.get("steps"):
                self.fail(f"job {u.get('job')}: staleness {u.get('staleness')} or steps {u.get('steps')} is not its own")
        self.version += 1
        if gid is not None:
            self.general = []
