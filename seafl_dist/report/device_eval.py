"""The device evaluation's files and statistics: how the global model does on each device's own held-out data.

    stats = summarise(values, sizes, mode="max")     # one evaluation, one metric: see SUMMARY_STATS
    files = DeviceEvalFiles(run_dir, names)          # device_metrics.csv and device_summary.csv of a run

Files of a run with ``run.device_eval_every`` set (runtime/device_eval.py evaluates):

- ``device_metrics.csv``: one row per (version, device evaluated): ``version, time, device, samples`` (its
  held-out count) and every metric (``accuracy, loss``, or what a module's own ``test_step`` logs); a device
  without a held-out sample has its row with ``samples`` 0 and the metrics blank.
- ``device_summary.csv``: per evaluation, one row per metric (:data:`SUMMARY_COLUMNS`).

Both are appended as the run goes, and cut back on resume to the lengths the checkpoint recorded, as
metrics.csv is, so a resumed run ends with the bytes of an uninterrupted one.

**The statistics** (:func:`summarise`), over the devices with at least one held-out sample (the others are
left out and counted in ``without_holdout``), with v_k the device's value and m_k its held-out count:
``weighted_mean`` = Σ m_k v_k / Σ m_k (for accuracy, the accuracy over all held-out samples pooled);
``mean`` = the plain mean over devices (each device one vote, as pfl-research's and TFF's per-client averages
are); ``std`` = their population standard deviation (numpy's ``std``, ddof 0: the spread of these devices);
``p10``, ``p50``, ``p90`` = numpy's quantiles (linear interpolation); ``worst10_mean`` = the mean of the worst
⌈10%⌉ of the devices (at least one): the lowest for a metric that rises (accuracy; ``run.target_metric`` with
``run.target_mode: max``), the highest for one that falls (loss; ``min``), blank for a metric of unknown
direction. ``holdout_min``, ``holdout_median``, ``holdout_max`` are the devices' held-out counts: a device of 3
samples has an accuracy of 0, ⅓, ⅔ or 1. A non-finite value (a loss that overflowed) is left out like a
device without samples, and counted in ``non_finite``.
"""
from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np

from seafl_dist.report.sinks import writing

DEVICE_METRICS, DEVICE_SUMMARY = "device_metrics.csv", "device_summary.csv"
DEVICE_COLUMNS = ["version", "time", "device", "samples"]  # then the metrics
STATS = ["weighted_mean", "mean", "std", "p10", "p50", "p90", "worst10_mean"]
SUMMARY_COLUMNS = ["version", "time", "metric", "devices", "without_holdout", "non_finite", *STATS,
                   "holdout_min", "holdout_median", "holdout_max"]
WORST_SHARE = 0.10


def direction(name: str, target_metric: str = "accuracy", target_mode: str = "max") -> str | None:
    """``max`` when a metric rises as the model gets better, ``min`` when it falls, None when not known."""
    if name == target_metric:
        return target_mode
    return {"accuracy": "max", "loss": "min"}.get(name)


def worst_mean(values: np.ndarray, mode: str | None) -> float | None:
    """The mean of the worst ⌈10%⌉ of ``values`` (at least one): the lowest for ``max``, the highest for ``min``."""
    if mode is None or not len(values):
        return None
    k = max(1, math.ceil(WORST_SHARE * len(values)))
    ordered = np.sort(values)
    return float(np.mean(ordered[:k] if mode == "max" else ordered[-k:]))


def summarise(values, sizes, mode: str | None) -> dict:
    """The statistics of one metric over the devices of one evaluation (module doc); ``values`` NaN where a device
    has no held-out sample."""
    values, sizes = np.asarray(values, dtype=np.float64), np.asarray(sizes, dtype=np.int64)
    has = sizes > 0
    ok = has & np.isfinite(values)
    v, m = values[ok], sizes[ok]
    out: dict = {"devices": int(ok.sum()), "without_holdout": int((~has).sum()), "non_finite": int((has & ~ok).sum())}
    if not len(v):
        return {**out, **{s: None for s in STATS}, "holdout_min": None, "holdout_median": None, "holdout_max": None}
    p10, p50, p90 = (float(q) for q in np.quantile(v, [0.1, 0.5, 0.9]))
    return {**out, "weighted_mean": float(np.sum(m * v) / np.sum(m)), "mean": float(np.mean(v)),
            "std": float(np.std(v)), "p10": p10, "p50": p50, "p90": p90, "worst10_mean": worst_mean(v, mode),
            "holdout_min": int(m.min()), "holdout_median": float(np.median(m)), "holdout_max": int(m.max())}


def _cell(v):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return v


class DeviceEvalFiles:
    """``device_metrics.csv`` and ``device_summary.csv`` of a run dir (rank 0). ``resume_at``: the byte lengths a
    checkpoint recorded, to which both are cut back before appending (runtime/checkpoint.py checked they are at least
    that long)."""

    def __init__(self, run_dir: Path, names: list[str], resume_at: tuple[int, int] | None = None):
        run_dir = Path(run_dir)
        self.names = list(names)
        paths = (run_dir / DEVICE_METRICS, run_dir / DEVICE_SUMMARY)
        if resume_at is not None:
            for path, size in zip(paths, resume_at):
                os.truncate(path, size)
        mode = "a" if resume_at is not None else "w"
        self._files = [open(p, mode, newline="") for p in paths]
        self._rows = csv.writer(self._files[0])
        self._summary = csv.DictWriter(self._files[1], fieldnames=SUMMARY_COLUMNS)
        if resume_at is None:
            with writing(paths[0]):
                self._rows.writerow(DEVICE_COLUMNS + self.names)
            with writing(paths[1]):
                self._summary.writeheader()

    def write(self, version: int, time: float, devices, sizes, values: dict, stats: dict) -> None:
        """One evaluation: a row per device (``values``: metric -> per-device array), a summary row per metric."""
        cols = [values[n] for n in self.names]
        with writing(self._files[0].name):
            self._rows.writerows([version, time, int(d), int(s), *(_cell(float(c[i])) if s else "" for c in cols)]
                                 for i, (d, s) in enumerate(zip(devices, sizes)))
        with writing(self._files[1].name):
            for name in self.names:
                self._summary.writerow({"version": version, "time": time, "metric": name,
                                        **{k: _cell(v) for k, v in stats[name].items()}})

    def flush(self, sync: bool = False) -> tuple[int, int]:
        """Push both files to the OS (``sync``: and to disk); their byte lengths."""
        sizes = []
        for f in self._files:
            with writing(f.name):
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            sizes.append(os.fstat(f.fileno()).st_size)
        return sizes[0], sizes[1]

    def close(self) -> None:
        for f in self._files:
            if not f.closed:
                try:
                    f.close()
                except OSError:  # a full disk: the run's own error has been raised already
                    pass


def _csv_rows(path: Path) -> list[dict]:
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def read_device_metrics(run_dir: Path) -> list[dict]:
    """device_metrics.csv's rows, numbers parsed (a blank metric is None); [] when the run has none."""
    ints = ("version", "device", "samples")
    return [{k: (int(v) if k in ints else float(v) if v != "" else None) for k, v in r.items()}
            for r in _csv_rows(Path(run_dir) / DEVICE_METRICS)]


def read_device_summary(run_dir: Path) -> list[dict]:
    """device_summary.csv's rows, numbers parsed; [] when the run has none."""
    ints = ("version", "devices", "without_holdout", "non_finite")
    return [{k: (v if k == "metric" else int(v) if k in ints else float(v) if v != "" else None) for k, v in r.items()}
            for r in _csv_rows(Path(run_dir) / DEVICE_SUMMARY)]


def device_rows_before(run_dir: Path, target: str, before: float) -> dict[int, tuple]:
    """{version: (time, {metric: stats}, the target metric's values)} of the device evaluations below ``before`` in
    device_summary.csv and device_metrics.csv ({} without device evaluation): what a resumed W&B run logs again
    (report/wandb_sink.py)."""
    out: dict[int, tuple] = {}
    try:
        for r in read_device_summary(run_dir):
            if r["version"] < before:
                entry = out.setdefault(r["version"], (r["time"], {}, []))
                entry[1][r["metric"]] = {k: v for k, v in r.items() if k not in ("version", "time", "metric")}
        for r in read_device_metrics(run_dir):
            if r["version"] in out and r.get(target) is not None:
                out[r["version"]][2].append(r[target])
    except (OSError, ValueError, KeyError):  # a file cut mid-row by a kill: what W&B lacks stays lacking
        return {}
    return out
