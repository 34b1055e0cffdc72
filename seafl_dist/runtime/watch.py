"""What rank 0 watches beside the trace (a part of :class:`~seafl_dist.runtime.server.Server`): each
update's norm (the update guard's history, algo/guard.py) and whether the run has diverged
(report/divergence.py). Said on stderr and in summary.json, never in events.jsonl or metrics.csv.

When the run is found to have diverged, one line names why, where, the aggregations into the
evaluation where it diverged, their jobs and each update's norm against the median of its buffer: a
job that blew up stands out by its norm. ``run.stop_on_divergence`` then ends the run (status
``diverged``); by default it goes on, since a paper's baseline must be allowed to fail.
"""
from __future__ import annotations

import statistics
import sys

from seafl_dist.algo.guard import NormHistory
from seafl_dist.report.divergence import Divergence, majority_share


class Watch:
    def __init__(self, exp):
        self.history = NormHistory()
        run = exp.cfg.run
        self.divergence = Divergence(majority_share(getattr(exp.test, "labels", None)), run.target_metric,
                                     run.target_mode)
        self.stop = exp.cfg.run.stop_on_divergence
        self.withheld = exp.cfg.privacy.withheld  # under DP the un-noised norms stay off stderr (docs/privacy.md)
        self.recent: list[dict] = []  # the aggregations since the last evaluation, with their updates' norms
        self.lead_in: list[dict] | None = None  # those into the first evaluation of an open collapse

    def aggregated(self, ev: dict, norms: list | None) -> None:
        """After aggregation ``ev`` (its ``updates`` carry the rule's info): remember its jobs' norms."""
        if self.withheld or norms is None:
            norms = [WITHHELD if self.withheld else None] * len(ev["updates"])
        ups = [(u["device"], u["job"], n, u.get("rejected")) for u, n in zip(ev["updates"], norms)]
        self.recent.append({"version": ev["version"], "time": ev["time"], "updates": ups})

    def evaluated(self, row: dict) -> bool:
        """After an evaluation: say once that the run diverged; True when it must stop here."""
        was_open = self.divergence.pending is not None
        why = self.divergence.observe(row)
        if self.divergence.pending is not None and not was_open:
            self.lead_in = self.recent  # the aggregations into the collapse, named if it lasts
        if why is not None:
            self._say(why, self.recent if self.divergence.at["version"] == row["version"] else self.lead_in)
        self.recent = []
        return why is not None and self.stop

    def finished(self) -> bool:
        """At the run's end (a collapse that lasted until then counts); True when the run stopped for it."""
        why = self.divergence.finish()
        if why is not None:
            self._say(why, self.lead_in)
        return self.divergence.at is not None and self.stop

    def _say(self, why: str, aggregations: list[dict] | None) -> None:
        at = self.divergence.at
        what = "; stopping (run.stop_on_divergence)" if self.stop else \
            "; going on (run.stop_on_divergence=true would stop it)"
        print(f"seafl: warning: the run diverged at version {at['version']} (virtual time {at['time']:.1f} s): "
              f"{why}; {_aggregations(aggregations)}{what}", file=sys.stderr, flush=True)

    def restore(self, state: dict, rows: list[dict]) -> None:
        """A resumed run: the norms its checkpoint kept, the divergence state its restored rows give."""
        self.history = NormHistory(state.get("update_norms", ()))
        self.divergence.replay(rows)

    def diverged_at(self) -> dict | None:
        return self.divergence.at


def _aggregations(aggregations: list[dict] | None) -> str:
    """The aggregations into the evaluation where the run diverged, each update's norm against its buffer's."""
    if aggregations is None:
        return "its aggregations are not known here (the run resumed since)"
    if not aggregations:
        return "no aggregation came before that evaluation"
    parts = []
    for agg in aggregations:
        norms = [n for _, _, n, _ in agg["updates"] if n is not None and n is not WITHHELD]
        median = statistics.median(norms) if norms else None
        jobs = ", ".join(_job(d, j, n, rej, median) for d, j, n, rej in agg["updates"])
        parts.append(f"aggregation {agg['version']} at {agg['time']:.1f} s: {jobs}")
    head = "the aggregation" if len(parts) == 1 else "the aggregations"
    return f"{head} since the evaluation before it: " + "; ".join(parts)


WITHHELD = "withheld"  # an update norm under DP without privacy.diagnostics: never said


def _job(device: int, job: int, norm, rejected, median) -> str:
    if norm is WITHHELD:
        return f"device {device} job {job}" + (" (rejected)" if rejected else "")
    if norm is None:
        return f"device {device} job {job} (rejected by the value check)"
    ratio = f" = {norm / median:.3g}× the buffer's median {median:.4g}" if median else ""
    return f"device {device} job {job} norm {norm:.4g}{ratio}" + (" (rejected)" if rejected else "")
