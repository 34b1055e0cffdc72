"""`seafl run` on FEMNIST (tiny files in LEAF's format) with one device per writer, end to end."""
import json

import numpy as np
import pytest

import seafl_dist
import in_process
from one_line import one_error_line
from seafl_dist.report.trace import check_run

from leaf_files import WRITERS, write_leaf

NATURAL = ["data.name=femnist", "data.partition=natural", "devices.num=null", "devices.concurrency=2",
           "algorithm.buffer_size=1", "train.epochs=1", "train.batch_size=4", "run.max_aggregations=3",
           "logging.progress=none", "runtime.threads=1"]


@pytest.fixture
def seafl():
    """``seafl ARGS`` in this process (tests/in_process.py: no interpreter start, the suite's time goes to the
    runs), as a finished process."""
    return in_process.seafl


def test_run_with_every_writer_a_device(tmp_path, seafl):
    made = write_leaf(tmp_path)
    out = tmp_path / "run"
    proc = seafl("run", "quickstart", f"data.root={tmp_path}", *NATURAL, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["aggregations"] == 3
    run = seafl_dist.load_run(out)
    assert run.config["devices"]["num"] is None  # the config as written; the writers resolve it
    part = run.partition
    assert part["dataset"] == "femnist" and part["method"] == "natural" and sorted(part["writers"]) == sorted(WRITERS)
    assert part["n_samples"] == [len(made["train"][w][1]) for w in part["writers"]]
    assert [sum(h) for h in part["label_histograms"]] == part["n_samples"]
    for w, hist in zip(part["writers"], part["label_histograms"]):
        assert hist == np.bincount(made["train"][w][1], minlength=62).tolist()
    devices = {e["device"] for e in run.events if e["event"] == "start"}
    assert devices <= set(range(len(WRITERS))) and len(devices) >= 2
    assert check_run(out) == []
    assert seafl("report", str(out)).returncode == 0
    before = (out / "summary.json").read_bytes()  # devices.num: null compares equal: the run is found completed
    again = seafl("run", "quickstart", f"data.root={tmp_path}", *NATURAL, "--out", str(out))
    assert again.returncode == 0 and (out / "summary.json").read_bytes() == before, again.stderr


def test_bad_input_is_one_line(tmp_path, seafl):
    write_leaf(tmp_path)
    bad = tmp_path / "femnist" / "test" / "all_data_1_niid_1_keep_0_test_9.json"
    obj = json.loads(bad.read_text())
    obj["user_data"]["f0004_28"]["y"][0] = 99
    bad.write_text(json.dumps(obj))
    proc = seafl("run", "quickstart", f"data.root={tmp_path}", *NATURAL, "--out", str(tmp_path / "r1"))
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == (f"seafl: error: FEMNIST file {bad}, writer 'f0004_28': sample "
                                           "0: label 99 is not an integer in 0..61")
    proc = seafl("run", "quickstart", "data.partition=natural", "--out", str(tmp_path / "r2"))
    assert proc.returncode == 2
    one_error_line(proc.stderr, "'data.partition' has value 'natural'", "digits has no writers")
