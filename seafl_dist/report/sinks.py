"""What a run leaves in its directory, written as it goes so nothing is lost on failure.

- ``config.yaml``: the resolved config,
- ``events.jsonl``: the SPEC event trace, one JSON object a line, in virtual-time order,
- ``metrics.csv``: one row per evaluation,
- ``train_log.csv``: what a module logged while training, per aggregation (report/trainlog.py; only
  for a module that logs),
- ``summary.json``: final figures (also written, with ``status: failed``, when a run dies),
- ``partition.json``: each device's sample count and label histogram,
- ``model.pt``: the final model's ``state_dict`` (written by the server at the end),
- ``checkpoint-*.pt``: while a run is under way (runtime/checkpoint.py).
Nothing here depends on real time except ``summary.json``'s ``wall_time_s`` (left out under DP without
``privacy.diagnostics``: docs/privacy.md, "No wall-clock channel"), so the other files are byte-identical on a rerun.
"""
from __future__ import annotations

import csv
import json
import math
import os
from contextlib import contextmanager
from pathlib import Path

from seafl_dist.report.trainlog import NAME as TRAIN_LOG, TrainLog

# statuses of a run that ended by itself (a stalled one would only stall again; a diverged one, stopped by
# run.stop_on_divergence, would only diverge again)
FINISHED = ("completed", "stalled", "diverged")
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


class RunFileError(RuntimeError):
    """A run file could not be written (a full disk, a quota, an I/O error): one line naming the path and why."""

    def __init__(self, path, cause: str):
        super().__init__(f"cannot write {path}: {cause}")
        self.path, self.cause = Path(path), cause


def os_error_in(err: BaseException) -> OSError | None:
    """The OSError behind ``err``, if any (torch.save wraps a full disk in a RuntimeError)."""
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, OSError):
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


@contextmanager
def writing(path):
    """Turn an OSError while writing ``path`` into a :class:`RunFileError` naming it."""
    try:
        yield
    except RunFileError:
        raise
    except Exception as err:
        os_err = os_error_in(err)
        if os_err is None:
            raise
        raise RunFileError(path, os_err.strerror or str(os_err)) from None


def write_json(path: Path, obj) -> None:
    path = Path(path)
    tmp = Path(str(path) + ".tmp")
    try:
        with writing(path):
            tmp.write_text(json.dumps(_clean(obj), indent=2) + "\n")
            tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # a write cut short by a full disk must not leave its temp behind


def read_json(path: Path) -> dict | None:
    """A JSON file of a run dir, or None if it is missing or unreadable (a run that died before writing it)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_summary(run_dir: Path) -> dict | None:
    """``summary.json`` of a run dir (None if absent or unreadable): the one reader of it."""
    return read_json(Path(run_dir) / "summary.json")


def read_config(run_dir: Path) -> dict | None:
    """``config.yaml`` of a run dir as a dict of sections (None if absent or unreadable): the one reader of it."""
    import yaml
    try:
        tree = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return tree if isinstance(tree, dict) else None


class RunWriter:
    """Append-only sinks of one run dir (rank 0 only).

    ``resume_at=(events_bytes, metrics_bytes)`` continues a checkpointed run: both files are cut
    back to the lengths the checkpoint recorded (dropping what the interrupted run wrote after
    it) and appended to; ``train_log.csv`` is written anew from the events kept."""

    def __init__(self, out_dir: str | Path, resume_at: tuple[int, int] | None = None,
                 columns: list[str] = METRIC_COLUMNS):
        self.dir, self.columns = Path(out_dir), list(columns)
        self.dir.mkdir(parents=True, exist_ok=True)
        ev_path, m_path = self.dir / "events.jsonl", self.dir / "metrics.csv"
        if resume_at is not None:  # runtime/checkpoint.py checked that both are at least this long
            for path, size in zip((ev_path, m_path), resume_at):
                os.truncate(path, size)
        with writing(self.dir / TRAIN_LOG):
            self._train = TrainLog(self.dir, resume=resume_at is not None)
        mode = "a" if resume_at is not None else "w"
        self._events = open(ev_path, mode)
        self._metrics_file = open(m_path, mode, newline="")
        self._metrics = csv.DictWriter(self._metrics_file, fieldnames=self.columns)
        if resume_at is None:
            with writing(m_path):
                self._metrics.writeheader()

    def event(self, ev: dict) -> None:
        clean = _clean(ev)
        with writing(self._events.name):
            self._events.write(json.dumps(clean) + "\n")
        if clean["event"] == "aggregate":
            with writing(self._train.path):
                self._train.write(clean)

    def metrics(self, row: dict) -> None:
        with writing(self._metrics_file.name):
            self._metrics.writerow({k: row.get(k) for k in self.columns})
            self._metrics_file.flush()
        with writing(self._events.name):
            self._events.flush()

    def flush(self, sync: bool = False) -> tuple[int, int]:
        """Push both files to the OS (a SIGKILL then loses nothing written so far); ``sync`` also
        fsyncs them (a checkpoint that records their lengths must not outlive their bytes).
        Returns their byte lengths."""
        sizes = []
        for f in (self._events, self._metrics_file):
            with writing(f.name):
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            sizes.append(os.fstat(f.fileno()).st_size)
        with writing(self._train.path):
            self._train.flush()  # rebuilt from the events on resume: no length to record
        return sizes[0], sizes[1]

    def close(self) -> None:
        """Close both files; what cannot be flushed any more (a full disk) is dropped, not raised:
        the error that stopped the run has been raised already, and a checkpoint records the lengths
        a resume cuts the files back to."""
        for f in (self._events, self._metrics_file):
            if not f.closed:
                try:
                    f.close()
                except OSError:
                    pass
        self._train.close()


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


def time_to_target(rows: list[dict], target: float, metric=None) -> float:
    """First virtual time at which the metric reaches ``target`` (SPEC "Metrics": accuracy >= target by
    default; ``metric`` a :class:`~seafl_dist.report.metric.Metric`, ``min``: at or below); inf if never."""
    from seafl_dist.report.metric import Metric
    metric = metric or Metric()
    for r in rows:
        if metric.reached(r.get(metric.name), target):
            return float(r["time"])
    return math.inf
