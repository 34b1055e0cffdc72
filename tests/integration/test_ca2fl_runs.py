"""CA²FL (algorithm.name=ca2fl) end to end: a run killed in the middle resumes to the uninterrupted run's bytes (its
cache is in the checkpoint), it learns the bundled digits within a stated budget, and a cache over its limit is
refused before anything trains."""
import json

import torch

import in_process
from one_line import one_error_line
from resuming import killed_during_3, reference, resumed_from_2, summary
from small_runs import QUICKSTART, SMALL

CA2FL = ["algorithm.name=ca2fl"]
BUDGET = 15  # aggregations: the quickstart's CA²FL passed 90% at aggregation 6 when this was written


def aggregated_devices(run, upto):
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    aggs = [e for e in events if e["event"] == "aggregate"][:upto]
    return {u["device"] for e in aggs for u in e["updates"] if not u.get("rejected")}


def test_a_ca2fl_run_killed_in_the_middle_resumes_to_the_same_bytes(tmp_path):
    """Killed during aggregation 3 (checkpoint at 2), with β = 2 and Adam on the model form: the resumed run must
    take the cache of every device aggregated so far from the checkpoint, or its third step differs."""
    args = [*SMALL, *CA2FL, "algorithm.staleness_limit=2", "algorithm.server_opt.name=adam",
            "algorithm.server_opt.lr=0.01", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    out = tmp_path / "run"
    state = killed_during_3(args, out)["rule_state"]
    assert set(state["cache"]) == aggregated_devices(ref, 2) and state["sum"].dtype == torch.float64
    assert torch.allclose(state["sum"], sum(h.to(torch.float64) for h in state["cache"].values()), atol=1e-6)
    resumed_from_2(ref, args, out)
    assert summary(out)["rule_state"]["keys"] == ["cache", "sum"]


def test_ca2fl_learns_the_digits_within_its_budget(tmp_path):
    proc = in_process.seafl("run", QUICKSTART, *CA2FL, "run.target_accuracy=0.9", f"run.max_aggregations={BUDGET}",
                            "logging.progress=none", "--out", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(tmp_path / "run")
    assert s["best_accuracy"] >= 0.9 and s["time_to_target"]["0.9"] is not None, s


def test_a_cache_over_its_limit_is_refused_before_anything_trains(tmp_path):
    out = tmp_path / "run"
    proc = in_process.seafl("run", QUICKSTART, *SMALL, *CA2FL, "algorithm.ca2fl.max_cache_gb=0.0001", "--out", out)
    assert proc.returncode != 0
    one_error_line(proc.stderr, "config key 'algorithm.ca2fl.max_cache_gb' has value 0.0001", "of memory",
                   "of disk", "more than the limit of 0.0001 GB")
    assert not (out / "events.jsonl").exists()
