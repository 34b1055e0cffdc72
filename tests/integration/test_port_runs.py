"""Port (algorithm.name: port) end to end: a run killed during aggregation 3 resumes from its checkpoint's rule_state
(the last L global models) to the uninterrupted run's bytes, and the quickstart learns the digits with it."""
import json


import in_process
from resuming import killed_during_3, reference, resumed_from_2, summary
from small_runs import QUICKSTART, SMALL

LENET5_DIGITS = 61_706  # the flat LeNet-5's entries on the 8×8 digits upscaled to 28×28 (10 classes, 1 channel)


def aggregates(run):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == "aggregate"]


def test_a_port_run_killed_during_aggregation_3_resumes_to_the_same_bytes(tmp_path):
    """L = 2: aggregations 3 and 4 (t = 2, 3) compare stale deltas with w_t − w_{t−2}, w_0 and w_1 taken from the
    checkpoint of aggregation 2; a resume that lost the state would give those updates c = 1 and other bytes."""
    args = [*SMALL, "algorithm.name=port", "algorithm.port.lag=2", "run.max_aggregations=4", "run.checkpoint_every=2",
            "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    after = [u for e in aggregates(ref)[2:4] for u in e["updates"]]
    assert any(u["staleness"] > 1 and u["cos"] != 1.0 for u in after), after  # the remembered models were read
    assert summary(ref)["rule_state"] == {"keys": ["models"], "tensors": 2, "bytes": 2 * LENET5_DIGITS * 4}
    out = tmp_path / "run"
    state = killed_during_3(args, out)["rule_state"]
    assert sorted(state["models"]) == [0, 1] and state["models"][0].numel() == LENET5_DIGITS
    resumed_from_2(ref, args, out)


def test_port_reaches_90_percent_on_the_digits_within_25_aggregations(tmp_path):
    """The quickstart with port reached 90% test accuracy at aggregation 12 (virtual 317 s) when this was written;
    25 leaves a margin for other machines' rounding."""
    proc = in_process.seafl("run", QUICKSTART, "algorithm.name=port", "run.max_aggregations=25",
                            "run.target_accuracy=0.9", "logging.progress=none", "--out", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["best_accuracy"] >= 0.9 and s["aggregations"] <= 25, s
