"""Malicious devices and their attacks (seafl_dist/threats/, issue 65 item 1): the config and its refusals, who is
malicious, the local attacks, the omniscient attacks against oracles written here from the papers, fast attackers
and the data attacks. Every expected value is computed here (numpy, scipy, by hand), never by the code tested."""
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from seafl_dist.data.dataset import ArrayDataset
from seafl_dist.settings import ConfigError, dump_config, load_config
from seafl_dist.algo import BufferedUpdate
from seafl_dist.sim import SpeedModel
from seafl_dist.sim.clock import fastest_first
from seafl_dist.sim.rng import stream_key, stream_seed
from seafl_dist.threats import Threats, alie_z, attack_delta, crafted_delta, malicious_devices, poisoned, triggered_test
from seafl_dist.threats.local import attacked_upload
from small_runs import QUICKSTART, SMALL


def cfg_of(*overrides):
    return load_config(QUICKSTART, [*SMALL, *overrides])


def refusal(*overrides) -> str:
    with pytest.raises(ConfigError) as err:
        cfg_of(*overrides)
    text = str(err.value)
    assert "\n" not in text
    return text


# ---- config -------------------------------------------------------------------------------------------------
def test_the_default_is_no_threat_and_config_yaml_is_unchanged():
    cfg = cfg_of()
    assert not cfg.threats.active
    assert "threats" not in dump_config(cfg)
    assert "threats" in dump_config(cfg_of("threats.malicious=0.3", "threats.attack=scale"))


@pytest.mark.parametrize("overrides, key", [
    (["threats.attack=sign_flip"], "threats.attack"),
    (["threats.fast=true"], "threats.fast"),
    (["threats.malicious_devices=[1,10]", "threats.attack=scale"], "threats.malicious_devices"),
    (["threats.malicious_devices=[1,1]"], "threats.malicious_devices"),
    (["threats.malicious_devices=[1]", "threats.malicious=0.2"], "threats.malicious"),
    (["threats.malicious=0.04"], "threats.malicious"),  # round(0.4) = 0 devices of 10
    (["threats.malicious=0.2", "privacy.enabled=true", "privacy.noise_multiplier=1.0"], "privacy.enabled"),
    (["threats.malicious=0.2", "threats.attack=alie", "algorithm.name=fedasync"], "threats.attack"),
    (["threats.malicious=0.2", "threats.attack=min_max", "algorithm.buffer_size=1"], "threats.attack"),
    (["threats.malicious=0.2", "threats.fast=true", "clock.idle.resample=per_epoch"], "threats.fast"),
    (["threats.malicious=0.2", "threats.fast=true", "clock.idle.distribution=none"], "threats.fast"),
    (["threats.malicious=0.2", "threats.attack=label_flip", "data.shards_overlap=true"], "data.shards_overlap"),
    (["threats.malicious=0.2", "threats.attack=backdoor", "data.name=shakespeare", "model.name=lstm"],
     "threats.attack"),
    (["threats.malicious=0.2", "threats.attack=backdoor", "model.name=mymodels:net"], "model.name"),
    (["threats.attack=foo"], "threats.attack"),
    (["threats.scale=0"], "threats.scale"),
    (["threats.malicious=1.5"], "threats.malicious"),
])
def test_bad_input_is_refused_in_one_line_naming_the_key(overrides, key):
    assert f"'{key}'" in refusal(*overrides)


def test_each_refusals_other_edge_is_accepted():
    cfg_of("threats.malicious=0.05")  # round(0.5) = 1 device of 10: the least fraction that picks one
    cfg_of("threats.malicious_devices=[0,9]", "threats.attack=scale")  # the largest id below N
    cfg_of("threats.malicious=0.2", "threats.attack=alie", "algorithm.buffer_size=2")  # K = 2: one honest to see
    cfg_of("threats.malicious=0.2", "threats.attack=sign_flip", "algorithm.name=fedasync")  # a local attack at K=1
    cfg_of("threats.malicious=0.2", "threats.fast=true", "clock.idle.distribution=pareto")


# ---- who is malicious ---------------------------------------------------------------------------------------
def test_the_malicious_devices_are_the_named_streams_draw():
    cfg = cfg_of("threats.malicious=0.3", "run.seed=5")
    expected = sorted(np.random.default_rng(stream_key(5, "malicious")).choice(10, size=3, replace=False).tolist())
    assert list(malicious_devices(cfg.threats, 10, 5)) == expected
    assert malicious_devices(cfg.threats, 10, 5) == malicious_devices(cfg.threats, 10, 5)  # a pure function
    assert len(malicious_devices(cfg_of("threats.malicious=0.25").threats, 10, 0)) == 3  # ⌊2.5 + 0.5⌋
    assert len(malicious_devices(cfg_of("threats.malicious=0.24").threats, 10, 0)) == 2  # ⌊2.4 + 0.5⌋
    assert len(malicious_devices(cfg_of("threats.malicious=0.05").threats, 10, 0)) == 1  # ⌊0.5 + 0.5⌋: the least
    named = cfg_of("threats.malicious_devices=[7,2]", "threats.attack=scale").threats
    assert malicious_devices(named, 10, 0) == (2, 7)


# ---- local attacks ------------------------------------------------------------------------------------------
def _model_pair(d=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    start, flat = torch.randn(d, generator=g), torch.randn(d, generator=g)
    params = torch.tensor([True] * (d - 3) + [False] * 3)  # the last three: statistics and counters
    return start, flat, params


@pytest.mark.parametrize("attack", ["sign_flip", "scale", "gaussian"])
def test_a_local_attack_changes_the_parameters_delta_only(attack):
    threats = cfg_of("threats.malicious=0.2", f"threats.attack={attack}", "threats.scale=3",
                     "threats.sigma=0.5").threats
    start, flat, params = _model_pair()
    out = attacked_upload(attack, flat, start, params, threats, run_seed=4, device=2, job=9)
    delta = (flat - start)[params]
    if attack == "sign_flip":
        want = -delta
    elif attack == "scale":
        want = 3 * delta
    else:  # noise from the job's own stream ("attack", device, job), N(0, σ²I)
        g = torch.Generator().manual_seed(stream_seed(4, "attack", 2, 9))
        want = delta + 0.5 * torch.randn(int(params.sum()), generator=g)
    torch.testing.assert_close(out[params] - start[params], want, rtol=1e-6, atol=1e-6)
    assert torch.equal(out[~params], flat[~params])


def test_the_gaussian_attack_adds_noise_of_sigma():
    threats = cfg_of("threats.malicious=0.2", "threats.attack=gaussian", "threats.sigma=0.25").threats
    noise = attack_delta("gaussian", torch.zeros(200_000), threats, seed=1)
    assert abs(float(noise.mean())) < 0.01 and abs(float(noise.std()) - 0.25) < 0.005


def test_an_honest_device_uploads_what_it_trained():
    cfg = cfg_of("threats.malicious_devices=[3]", "threats.attack=sign_flip")
    start, flat, params = _model_pair()
    threats = Threats(cfg, 10, params)
    assert threats.upload(flat, start, device=4, job=0) is flat
    assert not torch.equal(threats.upload(flat, start, device=3, job=0), flat)


# ---- omniscient attacks -------------------------------------------------------------------------------------
def _deltas(h, d=40, seed=1):
    return torch.randn(h, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("n, m, s", [(10, 2, 4), (10, 1, 5), (4, 3, 1), (4, 2, 1), (2, 1, 1), (50, 12, 14)])
def test_alies_z_is_the_papers(n, m, s):
    """Baruch et al. Algorithm 1: s = ⌊n/2 + 1⌋ − m supporters, z = Φ⁻¹((n − s)/n); s taken at least 1 (the
    (4, 3) and (4, 2) rows: s would be 0 and 1)."""
    assert s == max(math.floor(n / 2 + 1) - m, 1)
    assert alie_z(n, m) == pytest.approx(norm.ppf((n - s) / n), abs=1e-12)


def test_alie_is_mean_plus_z_std_of_the_honest_deltas():
    honest, own = _deltas(6), _deltas(2, seed=2)
    h = honest.numpy()
    given = cfg_of("threats.malicious=0.2", "threats.attack=alie", "threats.z=1.5").threats
    torch.testing.assert_close(crafted_delta("alie", honest, own, given).numpy(),
                               h.mean(0) + 1.5 * h.std(0, ddof=1))
    derived = cfg_of("threats.malicious=0.2", "threats.attack=alie").threats
    z = norm.ppf((8 - 3) / 8)  # n = 8, m = 2: s = 5 − 2 = 3
    torch.testing.assert_close(crafted_delta("alie", honest, own, derived).numpy(), h.mean(0) + z * h.std(0, ddof=1))


def test_ipm_is_minus_epsilon_times_the_honest_mean():
    honest, own = _deltas(5), _deltas(1, seed=3)
    threats = cfg_of("threats.malicious=0.2", "threats.attack=ipm", "threats.epsilon=0.5").threats
    torch.testing.assert_close(crafted_delta("ipm", honest, own, threats).numpy(), -0.5 * honest.numpy().mean(0))


def _perturbation(kind, r):
    mu = r.mean(0)
    return {"std": r.std(0, ddof=1), "unit_vector": mu / np.linalg.norm(mu), "sign": np.sign(mu)}[kind]


def _gamma_min_max(r, p):
    """The largest γ with max_i ‖μ − γp − r_i‖ ≤ max_{i,j} ‖r_i − r_j‖, in closed form: each constraint is the
    quadratic c γ² − 2 b_i γ + a_i − D² ≤ 0, true at γ = 0, so γ* = min_i of its larger root."""
    mu = r.mean(0)
    bound = max(np.sum((ri - rj) ** 2) for ri in r for rj in r)
    c = p @ p
    roots = [(b + math.sqrt(b * b - c * (a - bound))) / c
             for a, b in ((np.sum((mu - ri) ** 2), (mu - ri) @ p) for ri in r)]
    return min(roots)


def _gamma_min_sum(r, p):
    """The largest γ with Σ_i ‖μ − γp − r_i‖² ≤ max_i Σ_j ‖r_i − r_j‖²: Σ_i (μ − r_i) = 0, so
    Σ_i a_i + h c γ² ≤ bound, γ* = √((bound − Σ a_i) / (h c))."""
    mu = r.mean(0)
    bound = max(sum(np.sum((ri - rj) ** 2) for rj in r) for ri in r)
    return math.sqrt((bound - sum(np.sum((mu - ri) ** 2) for ri in r)) / (len(r) * (p @ p)))


@pytest.mark.parametrize("kind", ["std", "unit_vector", "sign"])
@pytest.mark.parametrize("attack", ["min_max", "min_sum"])
def test_min_max_and_min_sum_take_the_largest_gamma_their_constraint_allows(attack, kind):
    honest, own = _deltas(7, seed=4), _deltas(1, seed=5)
    threats = cfg_of("threats.malicious=0.2", f"threats.attack={attack}", f"threats.perturbation={kind}").threats
    out = crafted_delta(attack, honest, own, threats).numpy()
    r = honest.numpy()
    p = _perturbation(kind, r)
    gamma = (r.mean(0) - out) @ p / (p @ p)
    np.testing.assert_allclose(out, r.mean(0) - gamma * p, atol=1e-9)  # Δ_m = μ − γ p
    want = _gamma_min_max(r, p) if attack == "min_max" else _gamma_min_sum(r, p)
    assert gamma == pytest.approx(want, rel=1e-7)


def test_with_no_honest_update_the_attackers_own_deltas_are_the_reference():
    own = _deltas(3, seed=6)
    threats = cfg_of("threats.malicious=0.2", "threats.attack=ipm", "threats.epsilon=2").threats
    torch.testing.assert_close(crafted_delta("ipm", own[:0], own, threats).numpy(), -2 * own.numpy().mean(0))
    lone = cfg_of("threats.malicious=0.2", "threats.attack=min_max").threats  # one delta: σ = 0, so γ = 0
    torch.testing.assert_close(crafted_delta("min_max", own[:0], own[:1], lone), own[0])


def test_the_buffer_the_rule_sees_holds_the_crafted_update_on_its_own_base():
    cfg = cfg_of("threats.malicious_devices=[5]", "threats.attack=ipm", "threats.epsilon=1")
    d = 10
    params = torch.tensor([True] * 8 + [False] * 2)
    bases = {0: torch.zeros(d), 1: torch.full((d,), 2.0)}
    g = torch.Generator().manual_seed(7)
    ups = [BufferedUpdate(device=k, job=k, flat=bases[v] + torch.randn(d, generator=g), n_samples=10,
                          base_version=v, epochs=1) for k, v in ((1, 0), (5, 1), (2, 1))]
    event = {"updates": [{"device": u.device} for u in ups]}
    out = Threats(cfg, 10, params).landed(event, ups, bases.__getitem__)
    honest_mean = ((ups[0].flat - bases[0])[params] + (ups[2].flat - bases[1])[params]) / 2
    torch.testing.assert_close(out[1].flat[params], bases[1][params] - honest_mean)
    assert torch.equal(out[1].flat[~params], ups[1].flat[~params])  # statistics and counters as trained
    assert out[0] is ups[0] and out[2] is ups[2]
    assert [u.get("malicious", False) for u in event["updates"]] == [False, True, False]


# ---- fast attackers -----------------------------------------------------------------------------------------
def test_fast_attackers_take_the_smallest_idle_times_by_hand():
    # smallest two: device 5 (0.5) and device 1 (1.0); malicious 0 and 4 take them in that order; the displaced
    # honest devices 1 and 5 take the malicious devices' own 5.0 and 4.0, ascending; devices 2 and 3 keep theirs
    assert fastest_first([5.0, 1.0, 3.0, 2.0, 4.0, 0.5], [4, 0]) == [0.5, 4.0, 3.0, 2.0, 1.0, 5.0]
    assert fastest_first([1.0, 5.0, 0.5], [0, 2]) == [0.5, 5.0, 1.0]  # already the fastest: among themselves
    assert fastest_first([2.0, 2.0, 2.0, 1.0], [2]) == [2.0, 2.0, 1.0, 2.0]  # ties: the lower id is displaced
    assert fastest_first([3.0, 1.0], []) == [3.0, 1.0]


def test_with_fast_attackers_the_malicious_devices_get_exactly_the_smallest_idle_times():
    cfg = cfg_of("devices.num=50")
    n_samples = [100] * 50
    plain = SpeedModel(cfg.clock, n_samples, seed=3, epochs=1)
    bad = [4, 17, 30, 41, 49]
    fast = SpeedModel(cfg.clock, n_samples, seed=3, epochs=1, fast=bad)
    before = [plain.idle_times(k, 0)[0] for k in range(50)]
    after = [fast.idle_times(k, 0)[0] for k in range(50)]
    assert sorted(after) == sorted(before)
    assert sorted(after[k] for k in bad) == sorted(before)[:5]
    fastest = set(sorted(range(50), key=lambda k: (before[k], k))[:5])
    displaced = sorted(fastest - set(bad))
    assert displaced  # this draw has honest devices among the five fastest
    assert all(after[k] == before[k] for k in range(50) if k not in set(bad) | fastest)  # the rest unchanged
    assert [after[k] for k in displaced] == sorted(before[k] for k in bad if k not in fastest)


# ---- data attacks -------------------------------------------------------------------------------------------
def _images(n=40, classes=4):
    g = torch.Generator().manual_seed(8)
    return ArrayDataset(images=torch.randint(0, 200, (n, 1, 8, 8), generator=g, dtype=torch.uint8),
                        labels=torch.arange(n) % classes, num_classes=classes, name="toy", mean=(0.5,), std=(0.2,))


def test_label_flip_flips_the_malicious_shards_only():
    data = _images()
    shards = [np.arange(0, 10), np.arange(10, 20), np.arange(20, 40)]
    cfg = cfg_of("threats.malicious_devices=[1]", "threats.attack=label_flip").threats
    out = poisoned(data, shards, (1,), cfg, seed=0)
    want = data.labels.clone()
    want[10:20] = 3 - want[10:20]
    assert torch.equal(out.labels, want) and torch.equal(out.images, data.images)
    assert torch.equal(data.labels, torch.arange(40) % 4)  # the dataset loaded is never modified


def test_the_backdoor_triggers_a_share_of_each_malicious_shard():
    data = _images()
    shards = [np.arange(0, 10), np.arange(10, 17), np.arange(17, 40)]
    cfg = cfg_of("threats.malicious_devices=[0,1]", "threats.attack=backdoor", "threats.backdoor_fraction=0.5",
                 "threats.backdoor_target=2", "threats.trigger_size=2").threats
    out = poisoned(data, shards, (0, 1), cfg, seed=0)
    changed = torch.nonzero((out.images != data.images).flatten(1).any(1) | (out.labels != data.labels)).flatten()
    hit = set(changed.tolist())
    assert len(hit & set(range(10))) <= 5 and len(hit & set(range(10, 17))) <= 4  # ⌈0.5·10⌉, ⌈0.5·7⌉ at most
    assert not hit & set(range(17, 40))
    triggered = (out.images[:, :, -2:, -2:] == 255).flatten(1).all(1) & (out.labels == 2)
    assert int(triggered[:10].sum()) == 5 and int(triggered[10:17].sum()) == 4 and not triggered[17:].any()
    outside = torch.ones(8, 8, dtype=torch.bool)
    outside[-2:, -2:] = False
    assert torch.equal(out.images[:, :, outside], data.images[:, :, outside])  # only the corner square changes
    for device, shard in ((0, shards[0]), (1, shards[1])):  # the rows: the stream ("backdoor", device)'s draw
        pick = np.random.default_rng(stream_key(0, "backdoor", device)).choice(len(shard), size=math.ceil(
            0.5 * len(shard)), replace=False)
        assert sorted(shard[pick].tolist()) == sorted(i for i in hit if shard[0] <= i <= shard[-1])
    test = triggered_test(data, cfg)
    assert len(test) == 30 and bool((test.labels == 2).all())  # the 10 images of label 2 are left out
    assert bool((test.images[:, :, -2:, -2:] == 255).all())
