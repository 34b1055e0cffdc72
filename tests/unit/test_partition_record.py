"""The run dir's partition record: today's partition.json byte for byte up to COMPACT_ABOVE devices,
a header plus compressed columns (partition.npz) above, read back the same by read_partition and load_run."""
import json

import numpy as np

import seafl_dist
from seafl_dist.data import label_histograms
from seafl_dist.data.partition import label_counts
from seafl_dist.report.partition import COMPACT_ABOVE, read_partition, recorded_devices, write_partition


def _report(n_devices, seed=0, classes=10, writers=False):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, 500)
    shards = list(rng.integers(0, 500, (n_devices, 20)))
    shards[1] = shards[1][:3]  # uneven sizes too
    report = {"dataset": "digits", "method": "iid", "concentration": 0.3,
              "n_samples": np.array([len(s) for s in shards]), "label_histograms": label_counts(labels, shards, classes)}
    if writers:
        report["writers"] = [f"f{k:07d}_{k % 89}" for k in range(n_devices)]
    return report, labels, shards


def test_label_counts_is_label_histograms():
    _, labels, shards = _report(300)
    counted = [[sum(1 for i in s if labels[i] == c) for c in range(10)] for s in shards]  # one row at a time
    assert label_counts(labels, shards, 10, chunk=7).tolist() == counted
    assert label_histograms(labels, shards, 10) == counted
    assert label_histograms(labels, shards, 10)[1] == np.bincount(labels[shards[1]], minlength=10).tolist()


def test_small_population_writes_todays_json_byte_for_byte(tmp_path):
    report, labels, shards = _report(COMPACT_ABOVE)
    (tmp_path / "partition.npz").write_bytes(b"an older, larger run's columns")
    write_partition(tmp_path, report)
    # what the server wrote before: write_json of the lists (report/sinks.py, indent=2)
    before = {"dataset": "digits", "method": "iid", "concentration": 0.3, "n_samples": [len(s) for s in shards],
              "label_histograms": label_histograms(labels, shards, 10)}
    assert (tmp_path / "partition.json").read_text() == json.dumps(before, indent=2) + "\n"
    assert not (tmp_path / "partition.npz").exists()
    assert read_partition(tmp_path) == before and recorded_devices(tmp_path) == COMPACT_ABOVE


def test_large_population_is_compact_and_reads_back(tmp_path):
    report, _, _ = _report(COMPACT_ABOVE + 1, writers=True)
    write_partition(tmp_path, report)
    header = json.loads((tmp_path / "partition.json").read_text())
    assert header == {"dataset": "digits", "method": "iid", "concentration": 0.3, "devices": COMPACT_ABOVE + 1,
                      "classes": 10, "per_device": "partition.npz"}
    with np.load(tmp_path / "partition.npz") as z:  # plain arrays, no pickles, in the smallest types
        assert {z[k].dtype for k in ("n_samples", "hist_nnz", "hist_classes", "hist_counts")} == {np.dtype(np.uint8)}
    size = (tmp_path / "partition.npz").stat().st_size
    assert size < 16 * (COMPACT_ABOVE + 1)  # today's JSON: ~110 bytes a device
    back = read_partition(tmp_path)
    assert list(back) == ["dataset", "method", "concentration", "n_samples", "label_histograms", "writers"]
    assert np.array_equal(back["n_samples"], report["n_samples"])
    assert np.array_equal(back["label_histograms"], report["label_histograms"])
    assert back["writers"] == report["writers"]
    (tmp_path / "config.yaml").write_text("name: big\n")
    run = seafl_dist.load_run(tmp_path)
    assert np.array_equal(run.partition["label_histograms"], report["label_histograms"])
    assert recorded_devices(tmp_path) == COMPACT_ABOVE + 1
    assert read_partition(tmp_path / "nothing-here") is None and recorded_devices(tmp_path / "nothing-here") is None
