"""Device evaluation under torchrun W = 3 (issue 38 B.2): rank 0 gathers the chosen devices' held-out rows before it
drops the training set, the workers train on the training parts only, and the run dir is the one process's byte for
byte, device_metrics.csv and device_summary.csv included."""
import json

import pytest

from launching import run_torchrun
from resuming import reference
from small_runs import SMALL

pytestmark = pytest.mark.dist
ARGS = [*SMALL, "data.device_holdout=0.25", "run.device_eval_every=2", "run.device_eval_sample=7"]
SAME = ("config.yaml", "events.jsonl", "metrics.csv", "model.pt", "partition.json", "device_metrics.csv",
        "device_summary.csv")


def test_three_ranks_give_the_one_process_bytes(tmp_path):
    ref = reference(tmp_path / "w1", ARGS)
    proc = run_torchrun(3, *ARGS, "--out", tmp_path / "w3", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on 3 ranks (gloo)" in proc.stderr
    for name in SAME:
        assert (tmp_path / "w3" / name).read_bytes() == (ref / name).read_bytes(), name
    s1, s3 = (json.loads((d / "summary.json").read_text()) for d in (ref, tmp_path / "w3"))
    assert s1["device_eval"] == s3["device_eval"] and s3["device_eval"]["devices"] == 7
