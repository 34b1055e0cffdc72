"""The replay behind :mod:`seafl_dist.report.trace`: one pass over the events, one method per
event type, each checking its rules against the state the earlier events built (jobs in
flight, the buffer, the version, what must come next). The rules are listed in trace.py.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional

from seafl_dist.report.update_checks import UpdateChecks, _is_number

REQUIRED = {
    "start": ("time", "device", "job", "version", "epoch_ends"),
    "notify": ("time", "device", "job"),
    "finish": ("time", "device", "job", "epochs"),
    "aggregate": ("time", "version", "updates"),
    "eval": ("time", "version", "accuracy", "loss"),
}


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


class Replay(UpdateChecks):
    """State of the server as reconstructed from the trace; one method per event type."""
    required = REQUIRED

    def __init__(self, *, concurrency, buffer_size, staleness_limit, partial, upload_s, epochs, limit, schedule_only,
                 weights=True):
        self.M, self.K, self.beta, self.partial = concurrency, buffer_size, staleness_limit, partial
        self.upload_s, self.E, self.limit, self.schedule_only = upload_s, epochs, limit, schedule_only
        self.weights = weights and not schedule_only  # False: updates carry no weight (SEAFL's under DP, withheld)
        self.problems: list[str] = []
        self.dropped = 0
        self.where = ""
        self.version, self.version_time, self.now = 0, 0.0, -math.inf
        self.jobs: dict[int, dict] = {}  # every job ever started: its start event + state
        self.in_flight: dict[int, dict] = {}  # job id -> job record
        self.buffer: list[int] = []  # finished, not yet aggregated (job ids, finish order)
        self.last_finish: Optional[dict] = None  # the previous finish event (tie-break check)
        self.last_finish_time: Optional[float] = None
        self.expect: Optional[tuple] = None  # ("aggregate",) or ("notify", set of jobs) after a finish
        self.notified_now: set = set()
        self.starting = True  # in the block of starts after time 0 or an aggregation
        self.starts_since_agg = 0
        self.n_aggregates = 0
        self.evaluated: set = set()
        self.n_evals = 0
        self.n_samples: dict[int, int] = {}

    def fail(self, msg: str) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(f"{self.where}: {msg}")
        else:
            self.dropped += 1

    # ---- helpers ---------------------------------------------------------------------------
    def blocks(self, rec: dict) -> bool:
        return self.beta is not None and self.version - rec["version"] >= self.beta

    def expected_finish(self, rec: dict) -> Optional[float]:
        """The finish time the job must have (None while upload_s is still unknown)."""
        upload_s = rec.get("upload_s", self.upload_s)  # churn traces: each start event carries its own
        if upload_s is None:
            return None
        ends = rec["epoch_ends"]
        tau = rec.get("tau")
        if tau is None:
            return ends[-1] + upload_s
        e = self.notified_epochs(rec)
        return ends[e - 1] + upload_s

    @staticmethod
    def notified_epochs(rec: dict) -> int:
        """e with b_{e-1} <= tau < b_e (e >= 1); E when tau is at or after b_E (the upload)."""
        ends, tau = rec["epoch_ends"], rec["tau"]
        return next((e for e, b in enumerate(ends, start=1) if tau < b), len(ends))

    def close_starts(self) -> None:
        """The block of starts after time 0 or an aggregation is over: M must be in flight."""
        if self.starting and len(self.in_flight) != self.M:
            when = "time 0" if self.n_aggregates == 0 else f"aggregation to version {self.version}"
            self.fail(f"{len(self.in_flight)} jobs in flight after the starts of {when}, expected M = {self.M}")
        self.starting = False

    def settle_expectation(self, kind: str) -> None:
        """A finish may oblige the next event(s): an aggregate, or notify events."""
        if self.expect is None or (self.expect[0] == "notify" and kind == "notify"):
            return
        if self.expect[0] == "aggregate" and kind != "aggregate":
            self.fail(f"the buffer holds {len(self.buffer)} >= K = {self.K} updates and nothing blocks, "
                      "but no aggregation follows")
        elif self.expect[0] == "notify":
            missing = sorted(self.expect[1] - self.notified_now)
            if missing:
                self.fail(f"blocking jobs {missing} were not notified when the buffer reached K = {self.K}")
        self.expect = None

    def check_overdue(self, time: float) -> None:
        for rec in self.in_flight.values():
            fin = self.expected_finish(rec)
            if fin is not None and fin < time and not _close(fin, time) and not rec.get("overdue"):
                rec["overdue"] = True
                self.fail(f"job {rec['job']} (device {rec['device']}) should have finished at {fin} but is "
                          "still in flight")

    # ---- events ----------------------------------------------------------------------------
    def start(self, ev: dict) -> None:
        job = ev["job"]
        if not self.starting:
            self.fail(f"job {job} starts outside the starts that follow time 0 or an aggregation")
        if not _close(ev["time"], self.version_time):
            self.fail(f"job {job} starts at {ev['time']}, not at the time of version {self.version} "
                      f"({self.version_time})")
        self.add_job(ev)

    def add_job(self, ev: dict) -> Optional[dict]:
        """The checks of a start event that hold in every mode; the new job's record (None: a reused id)."""
        job, device = ev["job"], ev["device"]
        if job in self.jobs:
            self.fail(f"job id {job} is used twice")
            return None
        if ev["version"] != self.version:
            self.fail(f"job {job} starts from version {ev['version']}, the current version is {self.version}")
        busy = {r["device"]: r["job"] for r in self.in_flight.values()}
        if device in busy:
            self.fail(f"device {device} starts job {job} while its job {busy[device]} is in flight")
        ends = ev["epoch_ends"]
        if not isinstance(ends, list) or not ends or not all(_is_number(b) for b in ends):
            self.fail(f"job {job} has epoch_ends {ends!r}, expected a non-empty list of times")
            ends = [ev["time"]]
        elif self.E is not None and len(ends) != self.E:
            self.fail(f"job {job} plans {len(ends)} epochs, expected E = {self.E}")
        if any(b < a for a, b in zip([ev["time"], *ends], ends)):
            self.fail(f"job {job} has epoch_ends {ends} that do not rise from its start time {ev['time']}")
        rec = {"job": job, "device": device, "version": ev["version"], "epoch_ends": ends, "tau": None,
               "line": self.index}
        self.jobs[job] = rec
        self.in_flight[job] = rec
        self.starts_since_agg += 1
        if len(self.in_flight) > self.M:
            self.fail(f"{len(self.in_flight)} jobs in flight, more than M = {self.M}")
        return rec

    def notify(self, ev: dict) -> None:
        job = ev["job"]
        if not self.partial:
            self.fail(f"job {job} is notified, but this run does not use partial training (SEAFL²)")
        rec = self.in_flight.get(job)
        if rec is None:
            self.fail(f"job {job} is notified but is not in flight")
            return
        if rec["device"] != ev["device"]:
            self.fail(f"notify names device {ev['device']}, job {job} runs on device {rec['device']}")
        if rec["tau"] is not None:
            self.fail(f"job {job} is notified twice")
            return
        if self.expect is None or self.expect[0] != "notify" or job not in self.expect[1]:
            self.fail(f"job {job} is notified, but it is not a blocking job at a finish that filled the "
                      f"buffer to K = {self.K}")
        rec["tau"] = ev["time"]
        self.notified_now.add(job)
        if "epochs" in ev and ev["epochs"] != self.notified_epochs(rec):
            self.fail(f"notify of job {job} says {ev['epochs']} epochs, the epoch in progress at "
                      f"{ev['time']} is {self.notified_epochs(rec)}")

    def finish(self, ev: dict) -> None:
        job, t = ev["job"], ev["time"]
        rec = self.in_flight.pop(job, None)
        if rec is None:
            self.fail(f"job {job} finishes but is not in flight" + (" (it already finished)" if job in self.jobs else ""))
            return
        if rec["device"] != ev["device"]:
            self.fail(f"finish names device {ev['device']}, job {job} runs on device {rec['device']}")
        planned = len(rec["epoch_ends"]) if rec["tau"] is None else self.notified_epochs(rec)
        if ev["epochs"] != planned:
            self.fail(f"job {job} reports {ev['epochs']} epochs, expected {planned}")
        if rec["tau"] is None and self.upload_s is None and "upload_s" not in rec:  # infer upload_s from the first plain finish
            self.upload_s = t - rec["epoch_ends"][-1]
            if self.upload_s < 0 and not _close(t, rec["epoch_ends"][-1]):
                self.fail(f"job {job} finishes at {t}, before its last epoch ends ({rec['epoch_ends'][-1]})")
                self.upload_s = 0.0
        fin = self.expected_finish(rec)
        if fin is not None and not _close(fin, t):
            how = "planned b_E + upload_s" if rec["tau"] is None else \
                f"the end of the epoch in progress at its notification ({rec['tau']}) + upload_s"
            self.fail(f"job {job} finishes at {t}, expected {fin} ({how})")
        prev = self.last_finish  # ties: lower device first, among jobs in flight at the earlier finish
        if prev is not None and prev["time"] == t and rec["line"] < prev["line"] and ev["device"] < prev["device"]:
            self.fail(f"jobs finishing at the same time {t} are not in device order "
                      f"(device {prev['device']} before device {ev['device']})")
        self.last_finish = {"time": t, "device": ev["device"], "line": self.index}
        self.buffer.append(job)
        self.last_finish_time = t
        # what this finish obliges the server to do next
        self.notified_now = set()
        if len(self.buffer) >= self.K:
            blockers = {j for j, r in self.in_flight.items() if self.blocks(r)}
            if not blockers:
                self.expect = ("aggregate",)
            elif self.partial:
                self.expect = ("notify", {j for j in blockers if self.in_flight[j]["tau"] is None})

    def aggregate(self, ev: dict) -> None:
        t, new = ev["time"], ev["version"]
        if new != self.version + 1:
            self.fail(f"aggregation makes version {new}, expected {self.version + 1}")
        if self.last_finish_time is None or not _close(t, self.last_finish_time):
            self.fail(f"aggregation at {t} is not at the time of the finish that allowed it "
                      f"({self.last_finish_time})")
        updates = ev["updates"] if isinstance(ev["updates"], list) else []
        if not isinstance(ev["updates"], list):
            self.fail("updates is not a list")
        if len(updates) < self.K:
            self.fail(f"aggregation takes {len(updates)} updates, fewer than K = {self.K}")
        blockers = sorted(r["job"] for r in self.in_flight.values() if self.blocks(r))
        if blockers:
            self.fail(f"aggregation while in-flight jobs {blockers} block it (t − t_k >= β = {self.beta})")
        jobs = self.check_updates(updates)
        if len(set(jobs)) != len(jobs):
            self.fail(f"aggregation lists a job twice: {sorted(jobs)}")
        if set(jobs) != set(self.buffer):
            self.fail(f"aggregation takes jobs {sorted(set(jobs))}, the finished-but-unaggregated jobs are "
                      f"{sorted(self.buffer)}")
        self.version, self.version_time, self.buffer = new, t, []
        self.n_aggregates += 1
        self.starting, self.starts_since_agg = True, 0

    def eval(self, ev: dict) -> None:
        self.n_evals += 1
        if ev["version"] != self.version:
            self.fail(f"eval of version {ev['version']}, the current version is {self.version}")
        elif not _close(ev["time"], self.version_time):
            self.fail(f"eval of version {self.version} at {ev['time']}, the version was made at {self.version_time}")
        self.evaluated.add(ev["version"])
        acc, loss = ev["accuracy"], ev["loss"]
        if "metrics" in ev:  # a module's own test_step: its logged values, beside null accuracy and loss
            if not isinstance(ev["metrics"], dict) or not ev["metrics"] or acc is not None or loss is not None:
                self.fail(f"an evaluation by the module's own step holds metrics {ev['metrics']!r}, accuracy "
                          f"{acc!r} and loss {loss!r} (a mapping of logged values, and null for both)")
            elif any(v is not None and not _is_number(v) for v in ev["metrics"].values()):
                self.fail(f"metrics {ev['metrics']!r} are not numbers or null")
            return
        if not _is_number(acc) or not 0.0 <= acc <= 1.0:
            self.fail(f"accuracy {acc!r} is not a number in [0, 1]")
        if loss is not None and not _is_number(loss):  # null: a non-finite loss (JSON has no inf/nan)
            self.fail(f"loss {loss!r} is not a number or null")

    def end_starts(self) -> None:
        if self.starting and self.starts_since_agg > 0:
            self.close_starts()  # a trace may end right after an aggregation (stop rule) with no starts

    # ---- the replay ------------------------------------------------------------------------
    def run(self, events: Iterable[dict]) -> list[str]:
        self.index = 0
        for self.index, ev in enumerate(events, start=1):
            kind = ev.get("event") if isinstance(ev, dict) else None
            self.where = f"line {self.index} ({kind} at t={ev.get('time') if isinstance(ev, dict) else '?'})"
            if kind not in self.required:
                self.fail(f"unknown event type {kind!r}; known: {', '.join(self.required)}")
                continue
            missing = [k for k in self.required[kind] if k not in ev]
            if missing:
                self.fail(f"missing required keys {missing}")
                continue
            t = ev["time"]
            if not _is_number(t) or not math.isfinite(t):
                self.fail(f"time {t!r} is not a finite number")
                continue
            if t < self.now:
                self.fail(f"time {t} is before the previous event's time {self.now}")
            self.now = max(self.now, t)
            if kind != "eval":
                self.settle_expectation(kind)
                if kind != "start":
                    self.close_starts()
                self.check_overdue(t)
            getattr(self, kind)(ev)
        self.where = "end of trace"
        self.settle_expectation("end")
        self.end_starts()
        if self.n_evals == 0:
            if not self.schedule_only:
                self.fail("no eval events")
        elif self.version not in self.evaluated:
            self.fail(f"the last version ({self.version}) is never evaluated")
        if self.dropped:
            self.problems.append(f"... and {self.dropped} more")
        return self.problems
