"""FEMNIST with one device per writer under torchrun W = 3, each worker holding only its writers'
rows (runtime.placement=device): the run dir is the one process's, event for event."""
import subprocess
import sys

import pytest

from launching import clean_env, torchrun_cmd
from leaf_files import write_leaf
from small_runs import QUICKSTART

pytestmark = pytest.mark.dist


def test_writers_as_devices_on_three_ranks_match_one_process(tmp_path):
    write_leaf(tmp_path)
    args = [f"data.root={tmp_path}", "data.name=femnist", "data.partition=natural", "devices.num=null",
            "devices.concurrency=3", "algorithm.buffer_size=2", "train.epochs=1", "train.batch_size=4",
            "run.max_aggregations=3", "logging.progress=none", "runtime.threads=1", "runtime.placement=device"]
    one = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *args, "--out",
                          str(tmp_path / "w1")], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-4000:]
    three = subprocess.run(torchrun_cmd(3, *args, "--out", tmp_path / "w3"), cwd=tmp_path, env=clean_env(),
                           capture_output=True, text=True, timeout=300)
    assert three.returncode == 0, three.stderr[-4000:]
    for name in ("events.jsonl", "partition.json", "config.yaml"):
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w3" / name).read_bytes(), name
