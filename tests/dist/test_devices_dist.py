"""A run with a device profile and dropouts gives the same run dir on 3 torchrun ranks as in one
process (issue 17): jobs start between aggregations and drop, and none of it depends on the ranks."""
import json

import pytest

from device_runs import churn_overrides, write_profile
from launching import run_torchrun
from resuming import reference
from test_equivalence import assert_same_metrics

pytestmark = pytest.mark.dist


def test_profiled_run_with_dropout_matches_inprocess(tmp_path):
    profile = write_profile(tmp_path / "devices.csv")
    overrides = churn_overrides(profile, "algorithm.name=seafl2", "train.epochs=2", "algorithm.staleness_limit=1")
    ref = reference(tmp_path / "w1", overrides)  # in this process
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = run_torchrun(3, *overrides, "--out", "run", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 3 ranks (gloo)" in proc.stderr
    got = cwd / "run"
    for name in ("events.jsonl", "model.pt", "config.yaml", "partition.json"):
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    assert s_got == s_ref and s_got["drops"]["offline"] > 0 and s_got["drops"]["dropout"] > 0
