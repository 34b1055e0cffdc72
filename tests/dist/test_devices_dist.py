"""A run with a device profile and dropouts gives the same run dir on 3 torchrun ranks as in one
process (issue 17): jobs start between aggregations and drop, and none of it depends on the ranks."""
import pytest

from device_runs import churn_overrides, write_profile
from launching import in_process_and_on_ranks, same_summary
from test_equivalence import assert_same_metrics

pytestmark = pytest.mark.dist


def test_profiled_run_with_dropout_matches_inprocess(tmp_path):
    profile = write_profile(tmp_path / "devices.csv")
    overrides = churn_overrides(profile, "algorithm.name=seafl2", "train.epochs=2", "algorithm.staleness_limit=1")
    ref, got = in_process_and_on_ranks(3, overrides, tmp_path)
    for name in ("events.jsonl", "model.pt", "config.yaml", "partition.json"):
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_got = same_summary(ref, got)
    assert s_got["drops"]["offline"] > 0 and s_got["drops"]["dropout"] > 0
