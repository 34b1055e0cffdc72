"""runtime.batch_jobs = G > 1 end to end in one process (across torchrun ranks: a case of
test_features_on_ranks.py's one torchrun job, to this file's standard): what training
produced -- the final model, every evaluation's accuracy and loss, every aggregation weight --
stays within fp32 rounding of G = 1 (a fused step without momentum moves accuracies by up to 0.36
and the model by 0.26 here). The schedule cannot differ (it is computed from the config before
anything trains), so it is not what is tested. SEAFL² is used: notified stragglers train fewer
epochs, so groups mix jobs of different lengths."""
import json

import pytest
import torch

import trained
from small_runs import PER_ALGORITHM, QUICKSTART, SMALL
from seafl_dist.cli import main as seafl_main

pytestmark = pytest.mark.dist

# lr 0.02: at the quickstart's 0.05 with momentum 0.9 the first aggregations of this tiny run are
# chaotic (a job's fp32 rounding difference of 1e-4 moves the 6th accuracy by 0.1; in float64 the
# batched and the lone job agree exactly, see tests/unit/test_batched_train.py)
ARGS = [*SMALL, "algorithm.name=seafl2", *PER_ALGORITHM["seafl2"], "train.lr=0.02"]


def assert_trained_alike(ref_dir, got_dir):
    """fp32 rounding apart, what G = 1 trained (measured: accuracies equal, model 3e-3 apart)."""
    trained.assert_trained_alike(ref_dir, got_dir, accuracy=0.02, model=0.02, weight=1e-3, evaluations=7, learned=0.4)


def inprocess(out, *extra):
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            assert seafl_main(["run", str(QUICKSTART), *ARGS, *extra, "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "summary.json").read_text())


def test_batched_jobs_train_as_g1_in_one_process(tmp_path):
    """(Across ranks: tests/dist/test_features_on_ranks.py, in its one torchrun job.)"""
    inprocess(tmp_path / "g1")
    inprocess(tmp_path / "g4", "runtime.batch_jobs=4")
    assert any(ev["event"] == "notify" for ev in trained.events(tmp_path / "g1"))  # partial jobs are part of the groups
    assert_trained_alike(tmp_path / "g1", tmp_path / "g4")
