"""The defenses that read the server-held set (algorithm.defense.server_samples), each in one small run of the
quickstart in this process: the server-held set leaves the devices' shards disjoint from it, the trace records what the
defense decided, and a run killed during aggregation 3 resumes to the uninterrupted run's bytes (FLTrust's g_0 is
recomputed from the model and the version's named streams; it keeps no state)."""
import json

from resuming import killed_during_3, reference, resumed_from_2, summary
from small_runs import SMALL

FLTRUST = ["algorithm.name=fedbuff", "algorithm.defense.name=fltrust", "algorithm.defense.server_samples=100"]


def events(run, kind):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == kind]


def test_an_fltrust_run_records_each_updates_trust_and_its_shards_leave_out_the_server_set(tmp_path):
    run = reference(tmp_path / "run", [*SMALL, *FLTRUST])
    s = summary(run)
    assert s["status"] == "completed" and s["aggregations"] == 6 and "rule_state" not in s
    for e in events(run, "aggregate"):
        for u in e["updates"]:
            assert 0.0 <= u["trust"] <= 1.0 and (u["weight"] == 0.0) == (u["trust"] == 0.0), u
    evals = events(run, "eval")
    assert evals[-1]["accuracy"] > evals[0]["accuracy"], evals
    # the digits' 1,437 training rows (the bundled set's 1,797 less its 360 test rows) less the server's 100
    assert sum(json.loads((run / "partition.json").read_text())["n_samples"]) == 1437 - 100
    assert "server_samples: 100" in (run / "config.yaml").read_text()


def test_an_fltrust_run_killed_during_aggregation_3_resumes_to_the_same_bytes(tmp_path):
    args = [*SMALL, *FLTRUST, "run.max_aggregations=4", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    out = tmp_path / "run"
    killed_during_3(args, out)
    resumed_from_2(ref, args, out)
