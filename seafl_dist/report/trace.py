"""Replay an event trace and list every way it breaks the server loop's rules or the trace schema.

    from seafl_dist.report.trace import check_run, check_trace
    problems = check_run("runs/quickstart-20250101-120000")   # reads config.yaml + events.jsonl
    problems = check_trace(events, concurrency=10, buffer_size=5, staleness_limit=10, partial=False)

or from a shell (prints each violation, exits 1 if there is any):

    python -m seafl_dist.report.trace runs/quickstart-20250101-120000

An empty list means the trace is consistent. Each message starts with the event's line number
in ``events.jsonl`` (1-based) and its type and time. What is checked:

- events are in virtual-time order and have the keys required for their type (README, "The command line");
- job ids are unique; a job is started on a device with no job in flight, from the current
  version, at time 0 or at the time of the aggregation just before it; ``epoch_ends`` rise;
- M jobs are in flight after the starts at time 0 and after those of every aggregation,
  and never more than M;
- a finish comes at the job's planned ``b_E + upload_s`` or, for a notified job, at the end of
  the epoch in progress at the notify time (``b_e + upload_s``, the first b_e > τ) with
  ``epochs`` = e; jobs finishing at the same time come in increasing device order; no
  in-flight job is overdue;
- notify events occur only when ``partial``; at the finish that fills the buffer to >= K while
  an in-flight job blocks (t − t_k >= β), exactly the blocking jobs not yet notified are notified;
- an aggregate follows as soon as the buffer holds >= K and nothing blocks, at the time of the
  finish that allowed it, takes exactly the finished-but-unaggregated jobs, bumps the version
  by 1, and reports staleness = t − t_k <= β for every update;
- eval events exist, evaluate the current version at that version's time, and the last
  version reached is evaluated.

``upload_s`` and ``epochs`` (E) are optional: when ``upload_s`` is None it is inferred from the
first job that finished without notification; when ``epochs`` is None every job's planned epoch
count is only required to be >= 1.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Iterable, Optional

REQUIRED = {
    "start": ("time", "device", "job", "version", "epoch_ends"),
    "notify": ("time", "device", "job"),
    "finish": ("time", "device", "job", "epochs"),
    "aggregate": ("time", "version", "updates"),
    "eval": ("time", "version", "accuracy", "loss"),
}
UPDATE_KEYS = ("device", "job", "staleness", "n_samples", "weight")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class _Replay:
    """State of the server as reconstructed from the trace; one method per event type."""

    def __init__(self, *, concurrency, buffer_size, staleness_limit, partial, upload_s, epochs, limit, schedule_only):
        self.M, self.K, self.beta, self.partial = concurrency, buffer_size, staleness_limit, partial
        self.upload_s, self.E, self.limit, self.schedule_only = upload_s, epochs, limit, schedule_only
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
        if self.upload_s is None:
            return None
        ends = rec["epoch_ends"]
        tau = rec.get("tau")
        if tau is None:
            return ends[-1] + self.upload_s
        e = self.notified_epochs(rec)
        return ends[e - 1] + self.upload_s

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
        job, device = ev["job"], ev["device"]
        if not self.starting:
            self.fail(f"job {job} starts outside the starts that follow time 0 or an aggregation")
        if not _close(ev["time"], self.version_time):
            self.fail(f"job {job} starts at {ev['time']}, not at the time of version {self.version} "
                      f"({self.version_time})")
        if job in self.jobs:
            self.fail(f"job id {job} is used twice")
            return
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
        if rec["tau"] is None and self.upload_s is None:  # infer upload_s from the first plain finish
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
        jobs = []
        for u in updates:
            keys = UPDATE_KEYS[:-1] if self.schedule_only else UPDATE_KEYS
            missing = [k for k in keys if k not in u] if isinstance(u, dict) else list(keys)
            if missing:
                self.fail(f"an update lacks keys {missing}")
                if not isinstance(u, dict) or "job" not in u:
                    continue
            jobs.append(u["job"])
            rec = self.jobs.get(u["job"])
            if rec is None:
                self.fail(f"update of job {u['job']} that never started")
                continue
            if missing:
                continue
            if u["device"] != rec["device"]:
                self.fail(f"update of job {u['job']} names device {u['device']}, the job ran on {rec['device']}")
            s = self.version - rec["version"]
            if u["staleness"] != s:
                self.fail(f"update of job {u['job']} has staleness {u['staleness']}, expected "
                          f"{self.version} − {rec['version']} = {s}")
            if self.beta is not None and s > self.beta:
                self.fail(f"update of job {u['job']} has staleness {s} > β = {self.beta}")
            if "base_version" in u and u["base_version"] != rec["version"]:
                self.fail(f"update of job {u['job']} has base_version {u['base_version']}, it started from "
                          f"{rec['version']}")
            if self.n_samples.setdefault(rec["device"], u["n_samples"]) != u["n_samples"]:
                self.fail(f"device {rec['device']} reports n_samples {u['n_samples']}, earlier "
                          f"{self.n_samples[rec['device']]}")
            w = u.get("weight", 0.0)
            if not _is_number(w) or not math.isfinite(w) or w < 0:
                self.fail(f"update of job {u['job']} has weight {w!r}, expected a finite number >= 0")
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
        if not _is_number(acc) or not 0.0 <= acc <= 1.0:
            self.fail(f"accuracy {acc!r} is not a number in [0, 1]")
        if loss is not None and not _is_number(loss):  # null: a non-finite loss (JSON has no inf/nan)
            self.fail(f"loss {loss!r} is not a number or null")

    # ---- the replay ------------------------------------------------------------------------
    def run(self, events: Iterable[dict]) -> list[str]:
        handlers = {"start": self.start, "notify": self.notify, "finish": self.finish,
                    "aggregate": self.aggregate, "eval": self.eval}
        self.index = 0
        for self.index, ev in enumerate(events, start=1):
            kind = ev.get("event") if isinstance(ev, dict) else None
            self.where = f"line {self.index} ({kind} at t={ev.get('time') if isinstance(ev, dict) else '?'})"
            if kind not in REQUIRED:
                self.fail(f"unknown event type {kind!r}; known: {', '.join(REQUIRED)}")
                continue
            missing = [k for k in REQUIRED[kind] if k not in ev]
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
            handlers[kind](ev)
        self.where = "end of trace"
        self.settle_expectation("end")
        if self.starting and self.starts_since_agg > 0:
            self.close_starts()  # a trace may end right after an aggregation (stop rule) with no starts
        if self.n_evals == 0:
            if not self.schedule_only:
                self.fail("no eval events")
        elif self.version not in self.evaluated:
            self.fail(f"the last version ({self.version}) is never evaluated")
        if self.dropped:
            self.problems.append(f"... and {self.dropped} more")
        return self.problems


def check_trace(events: Iterable[dict], *, concurrency: int, buffer_size: int, staleness_limit: Optional[int],
                partial: bool, upload_s: Optional[float] = None, epochs: Optional[int] = None,
                schedule_only: bool = False, limit: int = 100) -> list[str]:
    """Human-readable violations of the SPEC invariants by ``events`` (empty: none).

    ``concurrency`` M, ``buffer_size`` K, ``staleness_limit`` β (None = ∞), ``partial``: SEAFL²
    notifications allowed. ``schedule_only=True`` checks the bare :class:`~seafl_dist.sim.Scheduler`
    stream, which has no eval events and no update weights (the runtime adds them). At most ``limit`` messages are listed, then a count
    of the rest.
    """
    replay = _Replay(concurrency=concurrency, buffer_size=buffer_size, staleness_limit=staleness_limit,
                     partial=partial, upload_s=upload_s, epochs=epochs, limit=limit, schedule_only=schedule_only)
    return replay.run(events)


def check_run(run_dir: str | Path, **overrides) -> list[str]:
    """``check_trace`` of a run dir's ``events.jsonl`` with M, K, β, partial, upload_s and E from its
    ``config.yaml`` (the resolved config the run wrote); keyword arguments override them."""
    import yaml

    from seafl_dist.report.sinks import read_events

    run_dir = Path(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    alg = cfg["algorithm"]
    kw = dict(concurrency=cfg["devices"]["concurrency"], buffer_size=alg["buffer_size"],
              staleness_limit=alg["staleness_limit"], partial=alg["name"] == "seafl2",
              upload_s=cfg["clock"]["upload_s"], epochs=cfg["train"]["epochs"])
    kw.update(overrides)
    return check_trace(read_events(run_dir / "events.jsonl"), **kw)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m seafl_dist.report.trace RUN_DIR\n"
              "Check a run's events.jsonl against the SPEC invariants (exit 1 on a violation).")
        return 0 if args and args[0] in ("-h", "--help") else 2
    problems = check_run(args[0])
    for p in problems:
        print(p)
    print(f"{args[0]}: {'OK' if not problems else f'{len(problems)} violation(s)'}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
