"""What a run leaves in its directory, written as it goes so nothing is lost on failure.

- ``config.yaml``: the resolved config,
- ``events.jsonl``: the SPEC event trace, one JSON object a line, in virtual-time order,
- ``metrics.csv``: one row per evaluation,
- ``summary.json``: final figures (also written, with ``status: failed``, when a run dies),
- ``partition.json``: each device's sample count and label histogram.
Nothing here depends on real time except ``summary.json``'s ``wall_time_s``, so the other
files are byte-identical on a rerun.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

METRIC_COLUMNS = ["version", "time", "accuracy", "loss", "updates", "mean_staleness", "max_staleness",
                  "notifications", "rejected"]


def _clean(obj):
    """JSON has no inf/nan: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: Path, obj) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(_clean(obj), indent=2) + "\n")
    tmp.replace(path)


class RunWriter:
    """Append-only sinks of one run dir (rank 0 only)."""

    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events = open(self.dir / "events.jsonl", "w")
        self._metrics_file = open(self.dir / "metrics.csv", "w", newline="")
        self._metrics = csv.DictWriter(self._metrics_file, fieldnames=METRIC_COLUMNS)
        self._metrics.writeheader()

    def event(self, ev: dict) -> None:
        self._events.write(json.dumps(_clean(ev)) + "\n")

    def metrics(self, row: dict) -> None:
        self._metrics.writerow({k: row.get(k) for k in METRIC_COLUMNS})
        self._metrics_file.flush()
        self._events.flush()

    def close(self) -> None:
        for f in (self._events, self._metrics_file):
            if not f.closed:
                f.close()


def read_events(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_metrics(path: str | Path) -> list[dict]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        out.append({k: (float(v) if k not in ("version",) and v not in ("", None) else
                        (int(v) if k == "version" else None)) for k, v in r.items()})
    return out


def time_to_target(rows: list[dict], target: float) -> float:
    """First virtual time at which accuracy >= target (SPEC "Metrics"); inf if never."""
    for r in rows:
        if r["accuracy"] is not None and r["accuracy"] >= target:
            return float(r["time"])
    return math.inf
