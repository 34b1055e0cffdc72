"""Each defense (algorithm.defense) in one small run of the quickstart in this process: the trace says which updates
a filter dropped and why, an estimator's run learns, and centered clipping's centre travels through a checkpoint
(a run killed during aggregation 3 resumes to the uninterrupted run's bytes)."""
import json

import pytest
import torch

from resuming import killed_during_3, reference, resumed_from_2, summary
from small_runs import SMALL

LENET5_DIGITS = 61_706  # the flat LeNet-5's entries on the digits

# name: (overrides, updates each filter phase drops from a buffer of K). Buffers of K = 5 (Bulyan: 7, its 4f + 3 at
# f = 1) out of as many in flight, so every aggregation takes exactly K updates (β = ∞: no one blocks).
CASES = {
    "krum": (["algorithm.name=seafl", "algorithm.staleness_limit=null", "algorithm.defense.name=krum",
              "algorithm.defense.f=1", "algorithm.buffer_size=5", "devices.concurrency=5"], 4),
    "multikrum": (["algorithm.name=fedbuff", "algorithm.defense.name=multikrum", "algorithm.defense.f=1",
                   "algorithm.buffer_size=5", "devices.concurrency=5"], 1),
    "median": (["algorithm.name=fedbuff", "algorithm.defense.name=median", "algorithm.buffer_size=4"], 0),
    "trimmed_mean": (["algorithm.name=fedbuff", "algorithm.defense.name=trimmed_mean", "algorithm.defense.beta=0.25",
                      "algorithm.buffer_size=4"], 0),
    "bulyan": (["algorithm.name=fedbuff", "algorithm.defense.name=bulyan", "algorithm.defense.f=1",
                "algorithm.buffer_size=7", "devices.concurrency=7"], 2),
    "centered_clipping": (["algorithm.name=fedbuff", "algorithm.defense.name=centered_clipping",
                           "algorithm.defense.tau=0.5"], 0),
}


def events(run, kind):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == kind]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_with_each_defense_completes_and_its_trace_names_what_it_dropped(name, tmp_path):
    overrides, drops = CASES[name]
    run = reference(tmp_path / "run", [*SMALL, *overrides])
    s = summary(run)
    assert s["status"] == "completed" and s["aggregations"] == 6
    aggs = events(run, "aggregate")
    for e in aggs:
        dropped = [u for u in e["updates"] if u["rejected"]]
        assert len(dropped) == drops, e
        assert all(u["weight"] == 0.0 and u["reason"].startswith(f"{name}: ") for u in dropped), e
    evals = events(run, "eval")
    assert evals[-1]["accuracy"] > evals[0]["accuracy"], evals  # the kept updates still train the model
    if name == "centered_clipping":
        assert s["rule_state"] == {"keys": ["centre"], "tensors": 1, "bytes": LENET5_DIGITS * 8}
    else:
        assert "rule_state" not in s
    assert f"defense:\n    name: {name}" in (run / "config.yaml").read_text()


def test_a_centered_clipping_run_killed_during_aggregation_3_resumes_to_the_same_bytes(tmp_path):
    """τ = 0.5 clips the LeNet-5 deltas (norms above 1 on the digits), so the centre after aggregation 2 decides
    aggregation 3's result: a resume that restarted it from 0 would not give the uninterrupted run's bytes."""
    args = [*SMALL, *CASES["centered_clipping"][0], "run.max_aggregations=4", "run.checkpoint_every=2",
            "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    out = tmp_path / "run"
    centre = killed_during_3(args, out)["rule_state"]["centre"]
    assert centre.dtype == torch.float64 and centre.numel() == LENET5_DIGITS and bool(centre.abs().sum() > 0)
    resumed_from_2(ref, args, out)


# AsyncFilter under SEAFL: nine devices of one speed and equal shards (idle none, iid), so the nine jobs of version 0
# arrive together and fill the buffers of aggregations 1, 2 and 3 at staleness 0, 1 and 2. Aggregation 3 (t = 2)
# compares its group with base 0's record, the average of the six before it, which travels in the checkpoint of
# aggregation 2 (``defense_state``): a resume without it would compare with the group's own mean and print another
# distance share in the trace.
ASYNCFILTER = ["algorithm.name=seafl", "algorithm.defense.name=asyncfilter", "algorithm.buffer_size=3",
               "devices.concurrency=9", "clock.idle.distribution=none", "data.partition=iid"]


def test_an_asyncfilter_run_killed_during_aggregation_3_resumes_with_its_record_to_the_same_bytes(tmp_path):
    args = [*SMALL, *ASYNCFILTER, "run.max_aggregations=4", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    aggs = events(ref, "aggregate")
    assert [sorted({u["staleness"] for u in e["updates"]}) for e in aggs[:3]] == [[0], [1], [2]]
    for e in aggs[:3]:  # a group of 3, three distinct distances: the farthest dropped
        dropped = [u for u in e["updates"] if u["rejected"]]
        assert len(dropped) == 1 and dropped[0]["reason"].startswith("asyncfilter: distance share ")
    out = tmp_path / "run"
    record = killed_during_3(args, out)["defense_state"]["record"]
    assert sorted(record) == [0] and record[0]["count"] == 6 and record[0]["mean"].numel() == LENET5_DIGITS
    resumed_from_2(ref, args, out)
