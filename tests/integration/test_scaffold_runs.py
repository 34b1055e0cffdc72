"""SCAFFOLD (algorithm.name: scaffold) in whole runs on SMALL's settings, in this process: c = (1/N) Σ_k c_k at the end
of every aggregation (the server's c, in the rule's state, against the devices' c_k, in the device state), the first
aggregation is FedBuff's to the bit (every c and c_k is still zero when its jobs start) and the later ones are not,
the upload's Δc is priced on the clock (twice LeNet-5's bytes, twice its upload time), and a run killed during
aggregation 3 resumes from its checkpoint at 2 (c of every version it keeps, each device's c_k) to the same bytes."""
import json

import pytest
import torch

from resuming import killed_during_3, reference, resumed_from_2
from seafl_dist.runtime.snapshots import Snapshots
from small_runs import SMALL

SCAFFOLD = ["algorithm.name=scaffold", "train.momentum=0"]
UPLOAD = ["clock.upload_s=1"]
EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]
ARGS = [*SMALL, *SCAFFOLD, *UPLOAD, *EVERY_2]
LENET5 = 61706  # LeNet-5's entries on the digits (8x8, 10 classes), every one a trainable parameter
N = 10  # SMALL's devices.num


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The scaffold run with each end of aggregation's c and c_k recorded, and FedBuff's run of the same settings."""
    seen = []
    consistent = Snapshots._consistent

    def recording(self, version, *args, **kwargs):
        consistent(self, version, *args, **kwargs)
        seen.append((version, self._snap["rule_state"].get("c", {}).get(version), dict(self._snap["controls"]["c"])))

    root = tmp_path_factory.mktemp("scaffold")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Snapshots, "_consistent", recording)
        out = reference(root / "scaffold", ARGS)
    fedbuff = reference(root / "fedbuff", [*SMALL, "algorithm.name=fedbuff", "train.momentum=0", *UPLOAD])
    return out, seen, fedbuff


def test_the_servers_c_is_the_mean_of_every_devices_c_k_after_each_aggregation(runs):
    _, seen, _ = runs
    assert [v for v, _, _ in seen] == list(range(7)) and seen[0][1] is None and seen[0][2] == {}
    for version, c, c_k in seen[1:]:
        assert c is not None and float(c.abs().max()) > 0, version
        mean = sum(t.double() for t in c_k.values()) / N  # devices never taken keep c_k = 0
        torch.testing.assert_close(c.double(), mean, rtol=0, atol=1e-6, msg=f"aggregation {version}")
    assert len(seen[-1][2]) > 2  # several devices hold a c_k


def test_the_first_aggregation_is_fedbuffs_and_the_later_ones_are_corrected(runs):
    out, _, fedbuff = runs
    rows = [line.split(",")[2:4] for line in (out / "metrics.csv").read_text().splitlines()[1:]]
    ref = [line.split(",")[2:4] for line in (fedbuff / "metrics.csv").read_text().splitlines()[1:]]
    assert rows[:2] == ref[:2]  # version 0 and 1: the same accuracy and loss
    assert rows[2:] != ref[2:]


def test_the_upload_carries_dc_beside_the_model_and_the_clock_charges_it(runs):
    out, _, _ = runs
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    starts = {e["job"]: e for e in events if e["event"] == "start"}
    finishes = [e for e in events if e["event"] == "finish"]
    assert finishes and all(e["bytes"] == 8 * LENET5 and e["model_bytes"] == 4 * LENET5 for e in finishes)
    for e in finishes:  # clock.upload_s = 1 is the model's upload; model and Δc take 2
        assert e["time"] == pytest.approx(starts[e["job"]]["epoch_ends"][-1] + 2.0)


def test_a_run_killed_during_aggregation_3_resumes_with_c_and_every_c_k_of_aggregation_2(runs, tmp_path):
    ref, seen, _ = runs
    out = tmp_path / "run"
    held = killed_during_3(ARGS, out)
    cs = held["rule_state"]["c"]
    assert 2 in cs and all(v in held["versions"] for v in cs)  # c of the versions the checkpoint keeps, no other
    assert torch.equal(cs[2], seen[2][1])
    c_k = held["controls"]["c"]
    assert sorted(c_k) == sorted(seen[2][2]) and all(torch.equal(c_k[d], seen[2][2][d]) for d in c_k)
    resumed_from_2(ref, ARGS, out)


def test_with_a_device_profile_the_download_of_w_and_c_and_the_upload_take_twice_fedbuffs(tmp_path):
    """A device profile prices both ways over the device's bandwidths (docs/devices.md): LeNet-5's c doubles the
    download as Δc doubles the upload. The first jobs (time 0, drawn before anything trains) are the same devices in
    both runs, so their start events' times compare one to one."""
    from device_runs import churn_overrides, write_profile
    profile = write_profile(tmp_path / "devices.csv")
    starts = {}
    for name, extra in (("scaffold", SCAFFOLD), ("fedbuff", ["algorithm.name=fedbuff", "train.momentum=0"])):
        out = reference(tmp_path / name, churn_overrides(profile, *extra, "run.max_aggregations=1"))
        events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
        starts[name] = [e for e in events if e["event"] == "start" and e["time"] == 0]
    assert [e["device"] for e in starts["scaffold"]] == [e["device"] for e in starts["fedbuff"]] != []
    assert any(f["download_s"] > 0 for f in starts["fedbuff"])  # (the laptop's download is free: inf bytes/s)
    for s, f in zip(starts["scaffold"], starts["fedbuff"]):
        assert s["download_s"] == pytest.approx(2 * f["download_s"]) and s["upload_s"] == pytest.approx(2 * f["upload_s"])
