"""What a run leaves in its directory, written as it goes so nothing is lost on failure.

- ``config.yaml``: the resolved config,
- ``events.jsonl``: the SPEC event trace, one JSON object a line, in virtual-time order,
- ``metrics.csv``: one row per evaluation,
- ``summary.json``: final figures (also written, with ``status: failed``, when a run dies),
- ``partition.json``: each device's sample count and label histogram,
- ``model.pt``: the final model's ``state_dict`` (written by the server at the end),
- ``checkpoint-*.pt``: while a run is under way (runtime/checkpoint.py).
Nothing here depends on real time except ``summary.json``'s ``wall_time_s``, so the other
files are byte-identical on a rerun.
"""
from __future__ import annotations

import csv
import json
import math
import os
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
    """Append-only sinks of one run dir (rank 0 only).

    ``resume_at=(events_bytes, metrics_bytes)`` continues a checkpointed run: both files are cut
    back to the lengths the checkpoint recorded (dropping what the interrupted run wrote after
    it) and appended to."""

    def __init__(self, out_dir: str | Path, resume_at: tuple[int, int] | None = None):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        ev_path, m_path = self.dir / "events.jsonl", self.dir / "metrics.csv"
        if resume_at is not None:  # runtime/checkpoint.py checked that both are at least this long
            for path, size in zip((ev_path, m_path), resume_at):
                os.truncate(path, size)
        mode = "a" if resume_at is not None else "w"
        self._events = open(ev_path, mode)
        self._metrics_file = open(m_path, mode, newline="")
        self._metrics = csv.DictWriter(self._metrics_file, fieldnames=METRIC_COLUMNS)
        if resume_at is None:
            self._metrics.writeheader()

    def event(self, ev: dict) -> None:
        self._events.write(json.dumps(_clean(ev)) + "\n")

    def metrics(self, row: dict) -> None:
        self._metrics.writerow({k: row.get(k) for k in METRIC_COLUMNS})
        self._metrics_file.flush()
        self._events.flush()

    def flush(self, sync: bool = False) -> tuple[int, int]:
        """Push both files to the OS (a SIGKILL then loses nothing written so far); ``sync`` also
        fsyncs them (a checkpoint that records their lengths must not outlive their bytes).
        Returns their byte lengths."""
        sizes = []
        for f in (self._events, self._metrics_file):
            f.flush()
            if sync:
                os.fsync(f.fileno())
            sizes.append(os.fstat(f.fileno()).st_size)
        return sizes[0], sizes[1]

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
