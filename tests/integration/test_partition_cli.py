"""A run of more than COMPACT_ABOVE devices writes the compact partition record, and the tools read it."""
import json
import os
import subprocess
import sys

import numpy as np

import seafl_dist
from seafl_dist.report.partition import COMPACT_ABOVE

SPLIT = '''
import numpy as np


def with_replacement(labels, num_devices, seed):
    return list(np.random.default_rng(seed).integers(0, len(labels), (num_devices, 5)))
'''


def test_many_devices_compact_record_through_cli(tmp_path):
    (tmp_path / "draws_rows.py").write_text(SPLIT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out, n = tmp_path / "run", COMPACT_ABOVE + 1
    args = ["quickstart", f"devices.num={n}", "devices.concurrency=2", "algorithm.buffer_size=1", "train.epochs=1",
            "run.max_aggregations=2", "data.partition=draws_rows:with_replacement", "data.shards_overlap=true",
            "logging.progress=none", "runtime.threads=1", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", *args], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "partition.json").read_text())["per_device"] == "partition.npz"
    run = seafl_dist.load_run(out)
    assert run.partition["n_samples"].tolist() == [5] * n and run.partition["label_histograms"].shape == (n, 10)
    assert np.array_equal(run.partition["label_histograms"].sum(axis=1), run.partition["n_samples"])
    report = subprocess.run([sys.executable, "-m", "seafl_dist", "report", str(out)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
