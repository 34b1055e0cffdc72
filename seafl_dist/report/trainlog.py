"""What a module logged while training (``self.log`` in its training hooks), per aggregation.

Each update carries its job's values (``{name: value}``, reduced over the job's steps as Lightning's
``on_epoch`` reduction does: train/standin.py) on its entry of the aggregate event, as ``logged``.
Per aggregation, a name's value is the mean over the accepted updates that logged it, weighted by
their n_k; it goes to ``train_log.csv`` (``version, time, name, value``, one row a name, names in
sorted order) and to W&B as ``train/<name>``. A run whose module logs nothing (the built-in models)
has no ``logged`` entries and no ``train_log.csv``. The file is a pure function of events.jsonl, so a
resumed run writes it anew from the events it kept, to the bytes an uninterrupted run writes.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

NAME = "train_log.csv"
COLUMNS = ["version", "time", "name", "value"]


def aggregation_values(event: dict) -> dict[str, float]:
    """``{name: n_k-weighted mean over the accepted updates that logged it}`` of one aggregate event.
    A value the trace holds as null (it was not finite) counts as NaN, as it was when logged."""
    sums: dict[str, float] = {}
    weights: dict[str, int] = {}
    for u in event.get("updates", ()):
        if u.get("rejected") or not u.get("logged"):
            continue
        for name, value in u["logged"].items():
            value = math.nan if value is None else float(value)
            sums[name] = sums.get(name, 0.0) + u["n_samples"] * value
            weights[name] = weights.get(name, 0) + u["n_samples"]
    return {name: sums[name] / weights[name] for name in sorted(sums)}


class TrainLog:
    """``train_log.csv`` of a run dir, made at its first row; ``resume=True`` rewrites it from events.jsonl."""

    def __init__(self, run_dir: Path, resume: bool = False):
        self.path = Path(run_dir) / NAME
        self._file = self._csv = None
        if resume:
            self.path.unlink(missing_ok=True)
            for event in logged_events(Path(run_dir) / "events.jsonl"):
                self.write(event)

    def write(self, event: dict) -> None:
        values = aggregation_values(event)
        if not values:
            return
        if self._file is None:
            self._file = open(self.path, "w", newline="")
            self._csv = csv.DictWriter(self._file, fieldnames=COLUMNS)
            self._csv.writeheader()
        for name, value in values.items():
            self._csv.writerow({"version": event["version"], "time": event["time"], "name": name, "value": value})

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass


def logged_events(events_path: Path) -> list[dict]:
    """The aggregate events of events.jsonl that carry logged values, in order (lines without
    ``"logged"`` are not parsed: a large trace stays cheap to scan)."""
    out = []
    try:
        with open(events_path) as f:
            for line in f:
                if '"logged"' in line and line.endswith("\n"):
                    event = json.loads(line)
                    if event.get("event") == "aggregate":
                        out.append(event)
    except FileNotFoundError:
        pass
    return out


def read_train_log(path: Path) -> list[dict]:
    """train_log.csv's rows with their numbers parsed ([] if the run logged nothing)."""
    try:
        with open(path, newline="") as f:
            return [{"version": int(r["version"]), "time": float(r["time"]), "name": r["name"],
                     "value": float(r["value"])} for r in csv.DictReader(f)]
    except FileNotFoundError:
        return []
