"""privacy/adaptive.py, adaptive clipping of central DP (issue 67 item 4; Andrew, Thakkar, McMahan and Ramaswamy,
"Differentially Private Learning with Adaptive Clipping", NeurIPS 2021, Algorithm 1 and §3.1). Every expected value
is written here from the paper: the geometric update C ← C·exp(−η_C (b̃ − γ)) with b̃ = (Σ_k 1[‖Δ_k‖ ≤ C] +
N(0, σ_b²))/K on a sequence of norms, the noised count's draw from the run's keyed stream (SHAKE-256 and the
Box–Muller sum written out here) or its seed, and z_Δ = (z⁻² − (σ_b/Δ_b)⁻²)^(−½) at both edges (σ_b at z·Δ_b
refused, σ_b → ∞ giving z), checked against dp-accounting's composition too. The section's refusals, one line."""
import hashlib
import math
import struct

import pytest
import torch

from one_line import one_line_message
from seafl_dist.privacy.adaptive import (AdaptiveClip, count_sensitivity, next_bound, noised_count, unclipped,
                                         update_multiplier)
from seafl_dist.privacy.noise import KeyedStream
from seafl_dist.settings import ConfigError, config_from_dict, dump_config
from seafl_dist.sim.rng import stream_seed

ON = ["privacy.enabled=true", "algorithm.name=fedbuff", "algorithm.buffer_size=4", "devices.concurrency=4",
      "privacy.adaptive_clip.enabled=true"]


def section(*extra):
    return config_from_dict({}, [*ON, "privacy.noise_multiplier=0.5", "privacy.adaptive_clip.count_std=2",
                                 *extra]).privacy.adaptive_clip


# ---- the geometric update ------------------------------------------------------------------------------

def test_the_geometric_update_on_a_sequence_of_norms_is_the_papers():
    """Four aggregations of K = 4 kept updates (a broken upload, norm None, is none of them), a norm exactly at C
    (within: ‖Δ‖ ≤ C), a NaN norm (a non-finite update, a zero delta: within), fixed count noise e_t."""
    gamma, eta, c0 = 0.3, 0.7, 2.0
    adaptive = AdaptiveClip(section(f"privacy.adaptive_clip.target_quantile={gamma}",
                                    f"privacy.adaptive_clip.lr={eta}"), z=0.5, buffer_size=4, initial=c0)
    rounds = [([0.5, 1.0, 3.0, None, 9.0], [0.4]),
              ([2.0, 2.0, 2.0, 2.0], [-1.3]),
              ([math.nan, 0.1, 50.0, 7.0], [0.0]),
              ([1.5, 1.6, 1.7, 1.8], [2.5])]
    c, want, got = c0, [], []
    for norms, (noise,) in rounds:
        kept = [n for n in norms if n is not None]
        b = sum(1 for n in kept if math.isnan(n) or n <= c)  # the paper's b_k = 1[‖Δ_k‖ ≤ C]
        fraction = (b + noise) / len(kept)
        c = c * math.exp(-eta * (fraction - gamma))
        want.append((fraction, c))
        drawn = []

        def draw(count, std, noise=noise):
            drawn.append((count, std))
            return count + noise
        got.append((adaptive.step(norms, list(range(len(kept))), draw), adaptive.bound))
        assert drawn == [(b, 2.0)]  # σ_b = count_std; every device once: s_b = 1
    assert [x for pair in got for x in pair] == pytest.approx([x for pair in want for x in pair], rel=1e-15)


def test_the_bound_settles_where_the_target_quantile_of_the_norms_lies():
    """Norms 1..10 every round, no count noise, γ = 0.5: C falls from 100 while more than half the norms are
    within it, and stops once exactly 5 of 10 are (C in [5, 6): b̃ = γ, exp(0) = 1). γ = 0.8 stops in [8, 9)."""
    for gamma, lo in ((0.5, 5.0), (0.8, 8.0)):
        adaptive = AdaptiveClip(section(f"privacy.adaptive_clip.target_quantile={gamma}"), 0.5, 10, initial=100.0)
        series = [adaptive.bound]
        for _ in range(200):
            adaptive.step([float(n) for n in range(1, 11)], list(range(10)), lambda count, std: float(count))
            series.append(adaptive.bound)
        assert lo <= series[-1] < lo + 1 and series[-1] == series[-2]
        assert all(b <= a for a, b in zip(series, series[1:]))  # from above, it only falls
    low = AdaptiveClip(section(), 0.5, 10, initial=0.01)  # from below, it only rises, to the same place
    for _ in range(200):
        low.step([float(n) for n in range(1, 11)], list(range(10)), lambda count, std: float(count))
    assert 5.0 <= low.bound < 6.0


def test_next_bound_and_the_count_at_their_edges():
    assert next_bound(3.0, 0.5, 0.5, 0.2) == 3.0  # at the target: unchanged
    assert next_bound(3.0, 1.0, 0.5, 0.2) == pytest.approx(3.0 * math.exp(-0.1), rel=1e-15)
    assert next_bound(3.0, 0.0, 0.5, 0.2) == pytest.approx(3.0 * math.exp(0.1), rel=1e-15)
    assert unclipped([1.0, 1.0 + 1e-12, None, math.nan], 1.0) == (2, 3)  # at C within, just above it not
    assert count_sensitivity([4, 7, 4, 9]) == 2 and count_sensitivity([1, 2, 3]) == 1
    adaptive = AdaptiveClip(section(), 0.5, 4, initial=1.0)
    seen = []
    adaptive.step([0.1, 0.2, 0.3], [5, 5, 6], lambda count, std: seen.append(std) or float(count))
    assert seen == [2.0 * 2]  # device 5 twice: the count can move by 2, its noise is σ_b·2
    assert math.isnan(adaptive.step([None], [], lambda c, s: 1 / 0)) and adaptive.bound == 1.0 * math.exp(-0.2 * 0.5)


# ---- the noised count's draw -------------------------------------------------------------------------------

def keyed_normal(key: bytes, version: int, stream: str) -> float:
    """The first N(0, 1) of docs/privacy.md's keyed stream, written out: SHAKE-256 of the tag, the key and the stream
    name (length-prefixed), the version and (chunk 0, draw d); four Box–Muller normals from 53-bit uniforms, halved."""
    name = stream.encode()
    prefix = b"seafl-dp-noise/v1\0" + struct.pack(">I", len(key)) + key + struct.pack(">I", len(name)) + name + \
        struct.pack(">Q", version)

    def uniform(draw):
        raw = hashlib.shake_256(prefix + struct.pack(">QI", 0, draw)).digest(8)
        k = (int.from_bytes(raw, "little", signed=True) >> 11) & ((1 << 53) - 1)
        return (k + 1) * 2.0 ** -53

    total = sum(math.sqrt(-2.0 * math.log(uniform(2 * i))) * math.cos(2.0 * math.pi * uniform(2 * i + 1))
                for i in range(4))
    return total / 2.0


def test_the_noised_count_is_drawn_from_the_keyed_stream_of_its_own_name():
    key = b"0123456789abcdef0123456789abcdef"
    got = noised_count(3, 0.25, KeyedStream(key, 7, "privacy-clip-count"))
    assert got == pytest.approx(3 + 0.25 * keyed_normal(key, 7, "privacy-clip-count"), rel=1e-14, abs=1e-14)
    assert got != pytest.approx(3 + 0.25 * keyed_normal(key, 7, "privacy"), rel=1e-6)  # not the update noise's draw
    assert noised_count(3, 0.25, KeyedStream(key, 8, "privacy-clip-count")) != got  # a draw per aggregation
    assert noised_count(3, 0.25, KeyedStream(key, 7, "privacy-clip-count")) == got  # the same key: the same draw


def test_the_noised_count_in_the_seeded_mode_is_torchs_draw_from_its_named_stream():
    seed = stream_seed(11, "privacy-clip-count", 4)
    want = 2 + 1.5 * float(torch.randn(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)[0])
    assert noised_count(2, 1.5, seed) == want
    assert noised_count(2, 0.0, seed) == 2.0
    secure = {noised_count(2, 1.0, None) for _ in range(3)}  # os.urandom: fresh each time
    assert len(secure) == 3


# ---- z_Δ ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("z, sigma", [(0.5, 2.0), (1.0, 5.0), (1.3, 1.31), (0.8, 1e6)])
def test_the_update_multiplier_is_the_papers_and_keeps_the_total_at_z(z, sigma):
    paper = (z ** -2 - (2 * sigma) ** -2) ** -0.5  # the paper's §3.1, add-or-remove: the count b_k − ½ moves by ½
    assert update_multiplier(z, sigma, 0.5) == pytest.approx(paper, rel=1e-14)
    mine = (z ** -2 - sigma ** -2) ** -0.5  # replace-one: a replaced update moves the count by 1
    z_delta = update_multiplier(z, sigma)
    assert z_delta == pytest.approx(mine, rel=1e-14) and z_delta > z
    assert (z_delta ** -2 + sigma ** -2) ** -0.5 == pytest.approx(z, rel=1e-12)  # the two releases: one mechanism of z


def test_the_update_multiplier_at_its_edges():
    z = 0.9
    with pytest.raises(ConfigError) as err:  # σ_b = z·Δ_b: z_Δ would be infinite
        update_multiplier(z, z)
    one_line_message(str(err.value), "config key 'privacy.adaptive_clip.count_std'", "0.9", "> 0.9", "raise")
    with pytest.raises(ConfigError):
        update_multiplier(z, z * 0.999)
    with pytest.raises(ConfigError):
        update_multiplier(z, 0.45, 0.5)  # the paper's edge: σ_b = z/2
    just = update_multiplier(z, z * (1 + 1e-6))  # just above: real and large
    assert just == pytest.approx((z ** -2 - (z * (1 + 1e-6)) ** -2) ** -0.5, rel=1e-6) and just > 100 * z
    far = update_multiplier(z, 1e8)  # σ_b → ∞: the count costs nothing, z_Δ → z
    assert far == pytest.approx(z, rel=1e-15) and far >= z
    assert update_multiplier(0.0, 1e-3) == 0.0  # no noise at all: nothing to raise


def test_dp_accounting_composes_the_count_and_the_update_into_z():
    """An independent check of the accounting: by dp-accounting's RDP (exact for Gaussians), the update with z_Δ
    and the count with σ_b/Δ_b, composed over 20 aggregations, spend what z alone spends."""
    import dp_accounting
    z, sigma, m, delta = 0.7, 1.4, 20, 1e-5
    z_delta = update_multiplier(z, sigma)

    def eps(event):
        acc = dp_accounting.rdp.RdpAccountant()
        acc.compose(event)
        return acc.get_epsilon(delta)
    both = dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(z_delta), dp_accounting.GaussianDpEvent(sigma)]), m)
    alone = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), m)
    assert eps(both) == pytest.approx(eps(alone), rel=1e-9)
    plain = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), m)
    unraised = dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(
        [plain.event, dp_accounting.GaussianDpEvent(sigma)]), m)
    assert eps(unraised) > eps(alone) * 1.05  # without raising z_Δ the count would cost extra


# ---- the section ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, key, allowed", [
    (["privacy.adaptive_clip.target_quantile=0"], "privacy.adaptive_clip.target_quantile", "a number in (0, 1)"),
    (["privacy.adaptive_clip.target_quantile=1"], "privacy.adaptive_clip.target_quantile", "a number in (0, 1)"),
    (["privacy.adaptive_clip.lr=0"], "privacy.adaptive_clip.lr", "a finite number > 0"),
    (["privacy.adaptive_clip.lr=inf"], "privacy.adaptive_clip.lr", "a finite number > 0"),
    (["privacy.adaptive_clip.count_std=0"], "privacy.adaptive_clip.count_std", "a finite number > 0, or null"),
    (["privacy.adaptive_clip.enabled=3"], "privacy.adaptive_clip.enabled", "true or false"),
    (["privacy.adaptive_clip.enabled=true"], "privacy.adaptive_clip.enabled", "false with privacy.enabled=false"),
    ([*ON, "privacy.noise_multiplier=1", "privacy.adaptive_clip.count_std=1"], "privacy.adaptive_clip.count_std",
     "a number > 1 = z·Δ_b"),
    ([*ON, "privacy.noise_multiplier=0.2"], "privacy.adaptive_clip.count_std", "a number > 0.2"),  # K/20 = 0.2
])
def test_bad_adaptive_clip_values_are_refused_in_one_line(overrides, key, allowed):
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, overrides)
    one_line_message(str(err.value), f"config key '{key}'", allowed)


def test_the_section_is_off_by_default_and_left_out_of_config_yaml_until_used():
    plain = config_from_dict({}, ["privacy.enabled=true", "privacy.noise_multiplier=0.5"])
    assert not plain.privacy.adaptive_clip.enabled and "adaptive_clip" not in dump_config(plain)
    assert "privacy:" not in dump_config(config_from_dict({}, []))  # the whole section still left out
    on = config_from_dict({}, [*ON, "privacy.noise_multiplier=0.19"])  # K/20 = 0.2 > 0.19: accepted
    assert on.privacy.adaptive_clip.count_std_for(4) == 0.2  # the paper's m/20 with m = K
    assert "  adaptive_clip:\n    enabled: true\n    target_quantile: 0.5\n    lr: 0.2\n    count_std: null\n" in \
        dump_config(on)
    assert config_from_dict({}, [*ON, "privacy.noise_multiplier=0"]).privacy.adaptive_clip.enabled  # z = 0: any σ_b


# ---- in the mechanism, for every rule central DP supports ----------------------------------------------------

def mechanism_run(rule, *extra, bound=None, seed_state=None):
    """One aggregation of a 3-update buffer (devices 1, 2, 1) by privacy/mechanism.py under ``rule``; the adaptive
    mechanism's C_t set to ``bound`` (as a resume would from its checkpoint; the C of the aggregation before, 99).
    The event, the new model and the mechanism."""
    from types import SimpleNamespace
    from seafl_dist.algo.types import BufferedUpdate, FlatParts
    from seafl_dist.privacy import Mechanism
    form = rule.split("_")[1] if rule.startswith("seafl_") else "delta"
    name = rule.split("_")[0]
    cfg = config_from_dict({}, [f"algorithm.name={name}", "devices.concurrency=4", "privacy.enabled=true",
                                f"privacy.seafl_form={form}", "privacy.seeded_noise=true", "privacy.clipping_bound=3",
                                *([] if name in ("fedavg", "fedasync", "asyncsgd") else ["algorithm.buffer_size=3"]),
                                *extra])
    dim = 50
    mech = Mechanism(cfg, FlatParts.all_params(dim), SimpleNamespace(names=("w",), shapes=((dim,),)), say=False)
    if bound is not None:
        mech.load({"inclusions": {}, "clipped": 0, "zeroed": 0, "adaptive_clip": {"bound": bound, "used": 99.0}})
    g = torch.Generator().manual_seed(5)
    models = {v: torch.randn(dim, generator=g) for v in (8, 9, 10)}
    ups = [BufferedUpdate(device=d, job=i, flat=models[b] + s * torch.randn(dim, generator=g), n_samples=n,
                          base_version=b, epochs=1)
           for i, (d, b, s, n) in enumerate([(1, 10, 0.3, 10), (2, 9, 2.0, 20), (1, 8, 1.0, 15)])]
    k = cfg.algorithm.buffer_size
    ups = ups[:k] if k < 3 else ups
    ev = {"updates": [{"device": u.device} for u in ups]}
    result = mech.aggregate(ev, cfg.algorithm, 10, models[10], ups, models.__getitem__, FlatParts.all_params(dim))
    return ev["privacy"], result.new_global, mech


RULES_UNDER_DP = ["fedbuff", "fedasync", "fedavg", "seafl_delta", "seafl_model", "seafl2", "fadas", "asyncsgd"]


@pytest.mark.parametrize("rule", RULES_UNDER_DP)
def test_every_rule_clips_at_c_t_and_its_s_and_noise_scale_with_it(rule):
    """The adaptive mechanism at C_t = 0.4 (moved from clipping_bound 3) clips, aggregates and computes S exactly as a
    fixed mechanism whose clipping_bound is 0.4 (no noise: the same bytes); with noise its std is z_Δ·S, S the fixed
    one's, and C_{t+1} follows the count of updates within 0.4."""
    adaptive = ["privacy.adaptive_clip.enabled=true", "privacy.adaptive_clip.count_std=4"]
    got, w_got, _ = mechanism_run(rule, "privacy.noise_multiplier=0", *adaptive, bound=0.4)
    want, w_want, _ = mechanism_run(rule, "privacy.noise_multiplier=0", "privacy.clipping_bound=0.4")
    assert got["sensitivity"] == want["sensitivity"] > 0 and torch.equal(w_got, w_want)
    assert got["clipping_bound"] == 0.4
    z = 0.9
    noisy, _, mech = mechanism_run(rule, f"privacy.noise_multiplier={z}", *adaptive, bound=0.4)
    assert noisy["sensitivity"] == want["sensitivity"]
    assert noisy["noise_std"] == pytest.approx((z ** -2 - 4.0 ** -2) ** -0.5 * want["sensitivity"], rel=1e-14)
    assert mech.bound != 0.4 and mech.summary()["privacy"]["adaptive_clip"]["last_clipping_bound"] == 0.4


def test_a_calibrated_z_too_large_for_sigma_b_is_refused_before_the_first_aggregation():
    from seafl_dist.privacy import Mechanism
    from seafl_dist.algo.types import FlatParts
    from types import SimpleNamespace
    cfg = config_from_dict({}, [*ON, "privacy.epsilon=1", "privacy.max_participation=4"])  # z ≈ 3.7 > K/20 = 0.2
    with pytest.raises(ConfigError) as err:
        Mechanism(cfg, FlatParts.all_params(3), SimpleNamespace(names=("w",), shapes=((3,),)), say=False)
    one_line_message(str(err.value), "config key 'privacy.adaptive_clip.count_std'", "0.2", "raise")


@pytest.mark.parametrize("mode", ["keyed", "seeded"])
def test_the_mechanisms_count_is_drawn_at_t_from_its_own_stream_of_the_runs_source(mode):
    """Aggregation t = version + 1 of a keyed (or seeded) run: C_{t+1} is C_t·exp(−η_C (b̃ − γ)) with b̃'s noise the
    first draw of the stream ``privacy-clip-count`` at t (the keyed stream written out above, or torch's generator
    from run.seed's named stream), never the update noise's stream ``privacy``."""
    from types import SimpleNamespace
    from seafl_dist.algo.types import BufferedUpdate, FlatParts
    from seafl_dist.privacy import Mechanism
    key = b"fedcba9876543210fedcba9876543210"
    cfg = config_from_dict({}, [*ON, "privacy.noise_multiplier=0.5", "privacy.adaptive_clip.count_std=2",
                                "privacy.clipping_bound=1", "run.seed=3",
                                *(["privacy.seeded_noise=true"] if mode == "seeded" else [])])
    mech = Mechanism(cfg, FlatParts.all_params(4), SimpleNamespace(names=("w",), shapes=((4,),)), say=False)
    mech.key = key
    w = torch.zeros(4)
    deltas = [0.5, 2.0, 0.9, 3.0]  # norms: two within C = 1
    ups = [BufferedUpdate(device=i, job=i, flat=torch.tensor([d, 0.0, 0.0, 0.0]), n_samples=5, base_version=6,
                          epochs=1) for i, d in enumerate(deltas)]
    mech.aggregate({"updates": []}, cfg.algorithm, 6, w, ups, {6: w}.__getitem__, FlatParts.all_params(4))
    if mode == "keyed":
        g, update_g = keyed_normal(key, 7, "privacy-clip-count"), keyed_normal(key, 7, "privacy")
    else:
        def first(name):
            gen = torch.Generator().manual_seed(stream_seed(3, name, 7))
            return float(torch.randn(1, generator=gen, dtype=torch.float64)[0])
        g, update_g = first("privacy-clip-count"), first("privacy")
    want = 1.0 * math.exp(-0.2 * ((2 + 2.0 * g) / 4 - 0.5))
    assert mech.bound == pytest.approx(want, rel=1e-12)
    assert mech.bound != pytest.approx(1.0 * math.exp(-0.2 * ((2 + 2.0 * update_g) / 4 - 0.5)), rel=1e-6)
