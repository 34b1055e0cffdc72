"""User-level DP under torchrun W = 3 (issue 42 A.6): the noise comes from the run's named stream keyed by the
aggregation and the counts m_k from the schedule, both on rank 0, so the run dir is the one process's byte for byte,
the cap's retirements and the aggregate events' ε included."""
import json

import pytest

from launching import in_process_and_on_ranks, same_summary
from small_runs import SMALL

pytestmark = pytest.mark.dist
ARGS = [*SMALL, "privacy.enabled=true", "privacy.noise_multiplier=0.8", "privacy.max_participation=2",
        "privacy.seafl_form=model"]  # SEAFL's paper form: S reads the distances between the bases rank 0 holds
SAME = ("config.yaml", "events.jsonl", "metrics.csv", "model.pt", "partition.json")


def test_three_ranks_give_the_one_process_bytes(tmp_path):
    ref, got = in_process_and_on_ranks(3, ARGS, tmp_path)
    for name in SAME:
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    assert same_summary(ref, got)["privacy"]["max_inclusions"] == 2
    aggs = [e for e in map(json.loads, (got / "events.jsonl").read_text().splitlines()) if e["event"] == "aggregate"]
    assert all(e["privacy"]["noise_std"] > 0 for e in aggs)
