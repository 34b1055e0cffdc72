"""Runs with malicious devices (issue 65 item 1) end to end in one process, on SMALL's settings: the malicious
devices recorded where the docs say, their updates marked in the trace, the schedule unchanged by an attack on the
update (and changed by fast attackers only as the docs define), and a backdoor's success rate in metrics.csv and
summary.json."""
import csv
import json
import signal

import numpy as np
import pytest
import torch
import yaml

from resuming import assert_same_run, checkpoint_versions, cli, reference, run_args
from seafl_dist.report.trace import check_run
from seafl_dist.sim.rng import stream, stream_key
from small_runs import SMALL

MALICIOUS = ["threats.malicious=0.3"]


def events(out):
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def schedule(out):
    return [e for e in events(out) if e["event"] in ("start", "finish")]


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("honest") / "run", SMALL)


@pytest.mark.parametrize("attack", ["sign_flip", "alie"])
def test_an_attack_on_the_update_changes_the_model_and_not_the_schedule(attack, honest, tmp_path):
    out = reference(tmp_path / attack, [*SMALL, *MALICIOUS, f"threats.attack={attack}"])
    assert check_run(out) == []
    bad = sorted(np.random.default_rng(stream_key(0, "malicious")).choice(10, size=3, replace=False).tolist())
    assert json.loads((out / "partition.json").read_text())["malicious"] == bad
    assert json.loads((out / "summary.json").read_text())["threats"] == {"malicious": bad, "attack": attack,
                                                                         "fast": False}
    marked = [(u["device"], u.get("malicious", False)) for e in events(out) if e["event"] == "aggregate"
              for u in e["updates"]]
    assert all(flag == (device in bad) for device, flag in marked) and any(flag for _, flag in marked)
    assert schedule(out) == schedule(honest)
    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (out, honest))
    assert any(not torch.equal(a[k], b[k]) for k in a)
    assert "threats" not in (honest / "config.yaml").read_text() and "threats" in (out / "config.yaml").read_text()
    assert "threats" not in json.loads((honest / "summary.json").read_text())


def test_fast_attackers_start_with_the_fastest_epochs(honest, tmp_path):
    out = reference(tmp_path / "fast", [*SMALL, *MALICIOUS, "threats.fast=true"])
    assert check_run(out) == []
    part = json.loads((out / "partition.json").read_text())
    bad, n = part["malicious"], part["n_samples"]
    sps = yaml.safe_load((out / "config.yaml").read_text())["clock"]["sec_per_sample"]

    def idle(run):  # a device's idle time: its first planned epoch less its compute time n_k × sec_per_sample
        return {e["device"]: e["epoch_ends"][0] - e["time"] - n[e["device"]] * sps for e in events(run)
                if e["event"] == "start"}

    clock = yaml.safe_load((out / "config.yaml").read_text())["clock"]["idle"]
    assert clock["distribution"] == "zipf" and clock["resample"] == "per_device"
    population = [min(float(stream(0, "idle", k).zipf(clock["s"])), clock["max"]) for k in range(10)]  # SPEC's draw
    fast = idle(out)
    assert set(bad) <= set(fast)  # every fast attacker trained in this short run
    assert sorted(fast[d] for d in bad) == pytest.approx(sorted(population)[:3])
    assert all(fast[d] >= max(fast[b] for b in bad) - 1e-9 for d in fast if d not in bad)
    assert schedule(out) != schedule(honest)


def test_a_backdoor_target_outside_the_labels_is_refused_in_one_line(tmp_path):
    from in_process import seafl
    from small_runs import QUICKSTART
    proc = seafl("run", QUICKSTART, *SMALL, *MALICIOUS, "threats.attack=backdoor", "threats.backdoor_target=10",
                 "--out", tmp_path / "r")
    assert proc.returncode == 2, proc.stderr
    assert "config key 'threats.backdoor_target' has value 10; allowed: a label of digits" in proc.stderr


def test_a_killed_run_with_a_backdoor_and_fast_attackers_resumes_to_the_same_bytes(tmp_path):
    """Nothing of an attack is state (docs/robustness.md, "Under DP, and resume"): the resumed run recomputes the
    poisoned shards, the fast attackers' clock and the success rate, and ends byte-identical."""
    overrides = [*SMALL, *MALICIOUS, "threats.attack=backdoor", "threats.fast=true", "run.checkpoint_every=2",
                 "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", overrides)
    out = tmp_path / "run"
    stopped = cli(*run_args(overrides, out), fault="during_aggregate:3")
    assert stopped.returncode == -signal.SIGKILL and checkpoint_versions(out) == [2]
    resumed = cli(*run_args(overrides, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {out} after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)
    assert (out / "partition.json").read_bytes() == (ref / "partition.json").read_bytes()


def test_every_device_sending_ipm_of_one_is_every_device_flipping_its_sign(tmp_path):
    """With every device malicious, IPM's reference is their own deltas, so under FedBuff (the buffer's mean delta,
    η_g = 1) IPM at ε = 1 aggregates −mean(Δ_k) exactly as every device's sign flip does: the two runs agree at every
    aggregation (up to rounding), stale updates included (each Δ_k on its own base w_{t_k})."""
    common = [*SMALL, "algorithm.name=fedbuff", "threats.malicious=1.0", "train.lr=0.002"]
    flip = reference(tmp_path / "flip", [*common, "threats.attack=sign_flip"])
    ipm = reference(tmp_path / "ipm", [*common, "threats.attack=ipm", "threats.epsilon=1"])
    assert any(u["staleness"] > 0 for e in events(ipm) if e["event"] == "aggregate" for u in e["updates"])
    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (flip, ipm))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_a_backdoor_runs_success_rate_is_the_models_accuracy_on_the_triggered_test_images(tmp_path):
    out = reference(tmp_path / "backdoor", [*SMALL, *MALICIOUS, "threats.attack=backdoor", "threats.backdoor_target=1",
                                            "threats.trigger_size=2", "run.max_aggregations=5"])
    assert check_run(out) == []
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    rates = [float(r["backdoor_asr"]) for r in rows]
    assert len(rates) == len(rows) and all(0.0 <= r <= 1.0 for r in rates)
    threats = json.loads((out / "summary.json").read_text())["threats"]
    assert threats["final_backdoor_asr"] == pytest.approx(rates[-1]) and threats["best_backdoor_asr"] == \
        pytest.approx(max(rates))
    from seafl_dist.data import load_dataset
    from seafl_dist.models import build_model
    from seafl_dist.train import evaluate, flatten
    test = load_dataset("digits", "data", train=False, seed=0)
    keep = test.labels != 1
    images = test.images[keep].clone()
    images[:, :, -2:, -2:] = 255  # the trigger, by hand: a 2 × 2 white square in the bottom-right corner
    triggered = type(test)(images=images, labels=torch.ones(int(keep.sum()), dtype=torch.int64),
                           num_classes=test.num_classes, name=test.name, mean=test.mean, std=test.std)
    model = build_model("lenet5", test.num_classes, test.in_channels, image_size=test.image_size)
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    rate, _ = evaluate(model, flatten(model), triggered)
    assert 0 < rate < 1  # a model that calls every image one class would score any image set alike
    assert threats["final_backdoor_asr"] == pytest.approx(rate, abs=1e-12)


def test_the_training_set_each_rank_builds_holds_the_flipped_labels(tmp_path):
    from seafl_dist.runtime.setup import prepare
    from seafl_dist.settings import load_config
    from small_runs import QUICKSTART
    plain = prepare(load_config(QUICKSTART, SMALL), need_test=False)
    flipped = prepare(load_config(QUICKSTART, [*SMALL, "threats.malicious_devices=[2,5]",
                                               "threats.attack=label_flip"]), need_test=False)
    rows = np.concatenate([plain.shards[2], plain.shards[5]])
    want = plain.train.labels.clone()
    want[rows] = plain.train.num_classes - 1 - want[rows]
    assert torch.equal(flipped.train.labels, want) and not torch.equal(want, plain.train.labels)


@pytest.fixture
def one_thread():
    """One torch thread, as the runs have (runtime.threads=1): two spinning threads on two busy cores are slow."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_on_a_batch_norm_model_the_attacks_leave_statistics_and_counters_as_trained(one_thread):
    """The trainer's local attack and the server's omniscient one touch the trainable parameters only."""
    from seafl_dist.algo import BufferedUpdate
    from seafl_dist.runtime.executor import GroupTrainer, JobSpec
    from seafl_dist.runtime.setup import prepare
    from seafl_dist.settings import load_config
    from small_runs import QUICKSTART
    bn = [*SMALL, "model.name=resnet18", "model.width=0.125", "threats.malicious_devices=[3]"]
    plain = prepare(load_config(QUICKSTART, bn[:-1]), need_test=False)
    flip = prepare(load_config(QUICKSTART, [*bn, "threats.attack=sign_flip"]), need_test=False)
    ipm = prepare(load_config(QUICKSTART, [*bn, "threats.attack=ipm", "threats.epsilon=1"]), need_test=False)
    parts, start = plain.flat_parts(), plain.initial_flat()
    assert parts.stats.any() and parts.counters.any()
    specs = [JobSpec(job=0, device=3, version=0, epochs=1, finish=1.0), JobSpec(job=1, device=4, version=0, epochs=1,
                                                                               finish=2.0)]
    honest = GroupTrainer(plain).train(specs, [start, start])
    flipped = GroupTrainer(flip).train(specs, [start, start])
    p = parts.params
    torch.testing.assert_close(flipped[0][p] - start[p], -(honest[0] - start)[p])
    assert torch.equal(flipped[0][~p], honest[0][~p]) and torch.equal(flipped[1], honest[1])
    ups = [BufferedUpdate(device=s.device, job=s.job, flat=f, n_samples=10, base_version=0, epochs=1)
           for s, f in zip(specs, honest)]
    event = {"updates": [{"device": s.device} for s in specs]}
    crafted = ipm.threats.landed(event, ups, lambda v: start)
    torch.testing.assert_close(crafted[0].flat[p] - start[p], -(honest[1] - start)[p])
    assert torch.equal(crafted[0].flat[~p], honest[0][~p]) and crafted[1] is ups[1]
