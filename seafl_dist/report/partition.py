"""The run dir's record of the split: each device's sample count and label histogram (none for samples without
integer labels, a DataModule's).

    write_partition(run_dir, report)     # report: dataset, method, ..., n_samples, label_histograms
    rec = read_partition(run_dir)        # the same keys back (None if the run wrote none)

Up to ``COMPACT_ABOVE`` devices (10,000) it is ``partition.json`` exactly as it always was: one
JSON object, indented, with ``n_samples`` and ``label_histograms`` as lists. That form costs
~110 bytes a device (each count on its own line), 110 MB at a million devices, so above the
threshold ``partition.json`` keeps only the header (dataset, method, ..., ``devices``, ``classes``,
``per_device: "partition.npz"``) and the per-device columns go to ``partition.npz``
(``numpy.savez_compressed``, no pickles): ``n_samples``, and each histogram's non-zero cells as
``hist_nnz`` (cells per device), ``hist_classes`` and ``hist_counts`` (row after row, classes
ascending), each in the smallest integer type that holds it; a per-device list of strings
(``writers``) is a string column. 1,000,000 devices with 20 samples of 10 classes each take
~6 MB there (benchmarks: docs/femnist.md).

:func:`read_partition` gives back the same keys for both forms; from the compact one
``n_samples`` is a 1-D and ``label_histograms`` a dense ``(devices, classes)`` numpy array
(the smallest integer type that holds the counts), ``writers`` a list. :func:`recorded_devices`
is N as the run resolved it (a config's ``devices.num`` may be null: one device per writer).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .sinks import write_json, writing

COMPACT_ABOVE = 10_000  # devices; up to this many, partition.json as before, byte for byte
PER_DEVICE = ("n_samples", "label_histograms", "writers")  # the keys with one entry per device


def write_partition(run_dir: Path, report: dict) -> None:
    """``partition.json`` (and, above ``COMPACT_ABOVE`` devices, ``partition.npz``) in ``run_dir``."""
    run_dir = Path(run_dir)
    devices = len(report["n_samples"])
    columns = run_dir / "partition.npz"
    if devices <= COMPACT_ABOVE:
        columns.unlink(missing_ok=True)  # an older, larger run's columns must not be read as this run's
        write_json(run_dir / "partition.json",
                   {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in report.items()})
        return
    arrays, classes = {"n_samples": _small(np.asarray(report["n_samples"]))}, 0
    if "label_histograms" in report:  # samples without labels (a DataModule's) have none
        hist = np.asarray(report["label_histograms"], dtype=np.int64)
        nz, classes = hist != 0, int(hist.shape[1])
        arrays.update(hist_nnz=_small(nz.sum(axis=1)), hist_classes=_small(np.nonzero(nz)[1]), hist_counts=_small(hist[nz]))
    if report.get("writers") is not None:
        arrays["writers"] = np.array(report["writers"], dtype=str)
    tmp = run_dir / f"partition.{os.getpid()}.tmp.npz"
    with writing(columns):  # a full disk: one line naming the file
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, columns)  # the columns first: a partition.json that names them finds them whole
    header = {k: v for k, v in report.items() if k not in PER_DEVICE}
    write_json(run_dir / "partition.json", {**header, "devices": devices, "classes": classes,
                                            "per_device": columns.name})


def read_partition(run_dir: Path) -> dict | None:
    """What :func:`write_partition` wrote (see the module doc), or None if the run wrote no record."""
    run_dir = Path(run_dir)
    try:
        record = json.loads((run_dir / "partition.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or "per_device" not in record:
        return record
    with np.load(run_dir / record.pop("per_device")) as z:
        n, classes = int(record.pop("devices")), int(record.pop("classes"))
        record["n_samples"] = z["n_samples"].astype(np.int64)
        if "hist_counts" in z.files:
            counts = z["hist_counts"]
            hist = np.zeros((n, classes), dtype=counts.dtype)
            rows = np.repeat(np.arange(n), z["hist_nnz"].astype(np.int64))
            hist[rows, z["hist_classes"].astype(np.int64)] = counts
            record["label_histograms"] = hist
        if "writers" in z.files:
            record["writers"] = [str(w) for w in z["writers"]]
    return record


def recorded_devices(run_dir: Path) -> int | None:
    """N as the run resolved it (``devices.num: null`` is the writer count), from its partition record."""
    try:  # the header alone: the compact form's columns need not be read
        record = json.loads((Path(run_dir) / "partition.json").read_text())
    except (OSError, ValueError):
        return None
    return int(record["devices"]) if "per_device" in record else len(record["n_samples"])


def _small(a: np.ndarray) -> np.ndarray:
    """``a`` (non-negative integers) in the smallest unsigned type that holds them: fewer bytes to compress."""
    a = np.asarray(a, dtype=np.int64)
    return a.astype(np.min_scalar_type(int(a.max()) if a.size else 0))
