"""When a run has diverged (SPEC "Metrics", docs/running.md "Divergence"), from its metric rows alone.

Let c be the largest class share of the test set (the accuracy of always answering that class) and
L₀ the loss of the version-0 evaluation. A run has diverged at the first evaluation where

- the loss is non-finite, or
- the loss > :data:`LOSS_FACTOR` · L₀ (a model worse than the untrained one by that much), or
- the best accuracy so far ≥ c + :data:`LEARNED` · (1 − c) (the run had learned: half way from chance
  to perfect) and the accuracy ≤ c + :data:`KEPT` · (best − c) (it kept at most a tenth of that), at
  this evaluation and the :data:`SUSTAINED` − 1 after it (or until the run's end, if that comes
  first); the run diverged at the first of them.

A module evaluated by its own ``test_step`` with another ``run.target_metric`` has no chance level:
its run diverges where that metric is non-finite, or, for a metric to minimise (``run.target_mode:
min``), above :data:`LOSS_FACTOR` times its version-0 value.

The accuracy rule waits because asynchronous runs dip and recover: the README's FedBuff example
(quickstart, seed 1) fell from 0.847 to 0.111 at version 8 and was back at 0.864 by version 10; the
loss rule does not wait (a loss ten times the untrained model's is no dip). The constants were
checked against the project's studies (docs/running.md, "Divergence").
Nothing here is written to events.jsonl or metrics.csv, whose bytes stay as they were; a resumed
run rebuilds the state from its restored rows (:meth:`Divergence.replay`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

LOSS_FACTOR = 10.0
LEARNED = 0.5
KEPT = 0.1
SUSTAINED = 3  # evaluations in a row the accuracy must stay collapsed (or until the run ends)


def majority_share(labels) -> float | None:
    """c: the largest class's share of ``labels`` (a 1-D integer tensor or array); None without labels."""
    if labels is None or len(labels) == 0:
        return None
    import numpy as np
    labels = labels.cpu().numpy() if hasattr(labels, "cpu") else np.asarray(labels)  # a tensor, maybe on a GPU
    counts = np.bincount(labels.reshape(-1).astype(np.int64))
    return float(counts.max() / counts.sum())


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _point(row: dict) -> dict:
    return {"version": int(row["version"]), "time": float(row["time"])}


@dataclass
class Divergence:
    """Fed every evaluation's row in order. ``at`` is ``{"version", "time"}`` of the evaluation where the run
    diverged, once that is known; ``pending`` the first evaluation of a collapse not yet sustained."""

    chance: float | None  # c; None (no class labels): the accuracy rule is off
    metric: str = "accuracy"  # run.target_metric: another one (a module's own test_step) has rules of its own
    mode: str = "max"
    first_loss: float | None = None
    best: float | None = None
    at: dict | None = None
    pending: dict | None = None  # {"version", "time", "why", "count"} of an open collapse

    def observe(self, row: dict) -> str | None:
        """Why the run diverged, at the evaluation where that becomes known; None at every other one."""
        acc, loss, what = row.get("accuracy"), row.get("loss"), "loss"
        if self.metric not in ("accuracy", "loss"):  # a module's own metric: no chance level to fall back to
            value, acc, what = row.get(self.metric), None, self.metric
            loss = value if self.mode == "min" or (value is not None and not _finite(value)) else None
        if self.first_loss is None and row.get("version") == 0:
            self.first_loss = loss
        why = None
        if self.at is None:
            why = self._blown_up(loss, what)
            if why is not None:  # during a collapse, the run diverged where the collapse began
                self.at = {k: self.pending[k] for k in ("version", "time")} if self.pending else _point(row)
                self.pending = None
            else:
                why = self._collapse(row, acc)
        if _finite(acc):
            self.best = acc if self.best is None else max(self.best, acc)
        return why

    def finish(self) -> str | None:
        """At the run's end: a collapse that lasted until then is a divergence, however short."""
        if self.at is not None or self.pending is None:
            return None
        return self._confirm()

    def _blown_up(self, loss, what: str) -> str | None:
        if loss is not None and not _finite(loss):
            return f"the {what} is {loss}"
        if _finite(loss) and _finite(self.first_loss) and self.first_loss > 0 and loss > LOSS_FACTOR * self.first_loss:
            return f"the {what} {loss:.4g} > {LOSS_FACTOR:g} × the version-0 {what} {self.first_loss:.4g}"
        return None

    def _collapse(self, row: dict, acc) -> str | None:
        """The accuracy rule, sustained: a collapse is named once it lasted :data:`SUSTAINED` evaluations."""
        c, best = self.chance, self.best
        if c is None or not _finite(acc) or best is None or not (best >= c + LEARNED * (1 - c)
                                                                  and acc <= c + KEPT * (best - c)):
            self.pending = None
            return None
        if self.pending is None:
            self.pending = {**_point(row), "count": 0,
                            "why": f"the accuracy fell to {acc:.4f}, keeping at most {KEPT:.0%} of the best "
                                   f"{best:.4f}'s margin over chance ({c:.4f}, the largest class's share of the "
                                   f"test set)"}
        self.pending["count"] += 1
        return self._confirm() if self.pending["count"] >= SUSTAINED else None

    def _confirm(self) -> str:
        p, self.pending = self.pending, None
        self.at = {"version": p["version"], "time": p["time"]}
        return p["why"] + (f", and stayed there for {p['count']} evaluations" if p["count"] > 1 else
                           ", and the run ended there")

    def replay(self, rows: list[dict]) -> None:
        """Rebuild the state of a resumed run from its restored rows (nothing is said again)."""
        for row in rows:
            self.observe(row)
