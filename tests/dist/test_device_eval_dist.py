"""Device evaluation under torchrun W = 3 (issue 38 B.2): rank 0 gathers the chosen devices' held-out rows before it
drops the training set, the workers train on the training parts only, and the run dir is the one process's byte for
byte, device_metrics.csv and device_summary.csv included."""
import pytest

from launching import in_process_and_on_ranks, same_summary
from small_runs import SMALL

pytestmark = pytest.mark.dist
ARGS = [*SMALL, "data.device_holdout=0.25", "run.device_eval_every=2", "run.device_eval_sample=7"]
SAME = ("config.yaml", "events.jsonl", "metrics.csv", "model.pt", "partition.json", "device_metrics.csv",
        "device_summary.csv")


def test_three_ranks_give_the_one_process_bytes(tmp_path):
    ref, got = in_process_and_on_ranks(3, ARGS, tmp_path)
    for name in SAME:
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    assert same_summary(ref, got)["device_eval"]["devices"] == 7
