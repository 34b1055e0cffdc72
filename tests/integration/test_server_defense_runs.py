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


def test_an_fltrust_run_records_trust_leaves_out_the_server_set_and_resumes_to_the_same_bytes(tmp_path):
    """The uninterrupted run: each update's trust in the trace, the shards without the server's 100 rows; then the
    same run killed during aggregation 3 and resumed."""
    args = [*SMALL, *FLTRUST, "run.max_aggregations=4", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    s = summary(ref)
    assert s["status"] == "completed" and s["aggregations"] == 4 and "rule_state" not in s
    for e in events(ref, "aggregate"):
        for u in e["updates"]:
            assert 0.0 <= u["trust"] <= 1.0 and (u["weight"] == 0.0) == (u["trust"] == 0.0), u
    evals = events(ref, "eval")
    assert evals[-1]["accuracy"] > evals[0]["accuracy"], evals
    # the digits' 1,437 training rows (the bundled set's 1,797 less its 360 test rows) less the server's 100
    assert sum(json.loads((ref / "partition.json").read_text())["n_samples"]) == 1437 - 100
    assert "server_samples: 100" in (ref / "config.yaml").read_text()
    out = tmp_path / "run"
    killed_during_3(args, out)
    resumed_from_2(ref, args, out)


# Zeno++ under SEAFL (a filter: any rule), v refreshed every 3 versions, so the v of version 0 is still the one in use at
# aggregation 3 (t = 2): it travels in the checkpoint of aggregation 2 (``defense_state``)
ZENO = ["algorithm.name=seafl", "algorithm.defense.name=zenopp", "algorithm.defense.server_samples=100",
        "algorithm.defense.refresh=3"]


def test_a_zeno_run_killed_during_aggregation_3_resumes_with_its_cached_v_to_the_same_bytes(tmp_path):
    args = [*SMALL, *ZENO, "run.max_aggregations=4", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    dropped = [u for e in events(ref, "aggregate") for u in e["updates"] if u["rejected"]]
    assert dropped and all(u["reason"].startswith("zenopp: score ") and u["weight"] == 0.0 for u in dropped)
    out = tmp_path / "run"
    state = killed_during_3(args, out)["defense_state"]
    assert state["version"] == 0 and state["v"].numel() == 61_706 and bool(state["v"].abs().sum() > 0)
    resumed_from_2(ref, args, out)


def test_the_dry_run_counts_the_devices_samples_without_the_server_held_set(tmp_path):
    import in_process
    from small_runs import QUICKSTART
    proc = in_process.seafl("run", QUICKSTART, *SMALL, *FLTRUST, "--out", tmp_path / "run", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout + proc.stderr
    assert "1337 training and 360 test images" in text and "100 more training samples held by the server" in text
    sizes = next(line for line in text.splitlines() if line.startswith("devices:")).split("(dirichlet): ")[1]
    assert sum(map(int, sizes.split(", "))) == 1337  # the ten shards the run makes (the run's test: 1,337 too)


def test_zenos_v_is_the_gradient_of_the_mean_cross_entropy_over_the_whole_server_set():
    """Oracle: one batch of all 100 rows through LeNet-5 (no batch norm, so the batches of 32 must sum to it), the
    mean cross-entropy's gradient by autograd, flattened in the state dict's order."""
    import torch
    import torch.nn.functional as F
    from seafl_dist.runtime.server_data import ServerData
    from seafl_dist.runtime.setup import prepare
    from seafl_dist.settings import load_config
    from small_runs import QUICKSTART
    exp = prepare(load_config(QUICKSTART, [*SMALL, *ZENO]))
    w = exp.initial_flat()
    v = ServerData(exp).gradient(0, w)
    model = exp.new_model()
    from seafl_dist.train import load_flat
    load_flat(model, w)
    x, y = exp.server_held.batch(torch.arange(100))
    F.cross_entropy(model(x), y).backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert v.shape == w.shape and len(exp.server_held) == 100
    assert torch.allclose(v, want, rtol=1e-4, atol=1e-6) and bool(want.abs().sum() > 0)
