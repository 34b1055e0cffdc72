"""The checks of an aggregation's updates, for :class:`~seafl_dist.report.replay.Replay` (a mixin
of it: the per-update rules of trace.py's list, against the jobs the replay has seen start)."""
from __future__ import annotations

import math

UPDATE_KEYS = ("device", "job", "staleness", "n_samples", "weight")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class UpdateChecks:
    """Needs the replay's ``fail``, ``jobs``, ``version``, ``beta``, ``n_samples`` and ``weights`` (False: the
    updates carry no weight, a bare scheduler stream's or SEAFL's under DP, and one they do carry is refused)."""

    def check_updates(self, updates: list) -> list:
        """The rules each update of an aggregation must keep; the job ids the updates name, in order."""
        jobs = []
        for u in updates:
            keys = UPDATE_KEYS if self.weights else UPDATE_KEYS[:-1]
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
            if not self.weights:
                if "weight" in u and not self.schedule_only:
                    self.fail(f"update of job {u['job']} carries a weight, which privacy withholds")
                continue
            w = u.get("weight", 0.0)
            if not _is_number(w) or not math.isfinite(w) or w < 0:
                self.fail(f"update of job {u['job']} has weight {w!r}, expected a finite number >= 0")
        return jobs
