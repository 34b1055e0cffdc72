"""User-level DP's pure parts (privacy/, issue 42 A): clipping (norm ≤ C over parameters and statistics, counters
exact, a non-finite update a zero delta), each rule's sensitivity S tight on a pair of neighbouring buffers, the
noise's std z·S by a stated statistical test, the variance clamp, the accountant against dp-accounting called
directly, and the privacy section's refusals (one line each)."""
import math
import subprocess
import sys

import pytest
import torch

from one_line import one_line_message
from seafl_dist.algo.fedasync import fedasync
from seafl_dist.algo.fedavg import fedavg
from seafl_dist.algo.fedbuff import fedbuff
from seafl_dist.algo.types import BufferedUpdate, FlatParts
from seafl_dist.privacy import (add_noise, calibrate, clamp_variance, clip_updates, coefficients, epsilon,
                                noise_seed, run_epsilon, sensitivity, variance_mask)
from seafl_dist.privacy.accountant import pld_grid
from seafl_dist.settings import ConfigError, config_from_dict, dump_config

RULES = {"fedbuff": fedbuff, "fedasync": fedasync, "fedavg": fedavg}
F64 = torch.float64


def layout(n_params=40, n_stats=10, n_counters=2):
    """Parts of a flat model: parameters, then statistics, then counters (a batch-norm model's kinds)."""
    n = n_params + n_stats + n_counters
    kind = torch.tensor([0] * n_params + [1] * n_stats + [2] * n_counters)
    return FlatParts(kind == 0, kind == 1, kind == 2), n


def model(n, parts, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, generator=g)
    w[parts.counters] = 100.0
    return w


def update(device, flat, base_version, n_samples=10, job=0):
    return BufferedUpdate(device=device, job=job, flat=flat, n_samples=n_samples, base_version=base_version, epochs=1)


def realised_norm(flat, base, parts):
    m = parts.params | parts.stats
    d = flat[m].to(F64) - base[m].to(F64)
    return math.sqrt(float(torch.dot(d, d)))


# ---- clipping ---------------------------------------------------------------------------------------------------

def test_every_clipped_delta_has_norm_at_most_c_over_parameters_and_statistics_and_counters_stay_exact():
    parts, n = layout()
    bases = {v: model(n, parts, v) for v in range(3)}
    C = 0.5
    ups = []
    for i, (scale, v) in enumerate([(10.0, 0), (1e-3, 1), (1.0, 2), (3.0, 2), (1e4, 0)]):
        w = bases[v] + scale * torch.randn(n, generator=torch.Generator().manual_seed(10 + i))
        w[parts.counters] = bases[v][parts.counters] + 7 + i  # base + steps trained
        ups.append(update(i, w, v))
    stats_only = bases[1].clone()
    stats_only[parts.stats] += 5.0  # a delta in the statistics alone is clipped too
    ups.append(update(9, stats_only, 1))
    clipped, norms = clip_updates(ups, bases.__getitem__, parts, C)
    for u, c, norm in zip(ups, clipped, norms):
        base = bases[u.base_version]
        assert realised_norm(c.flat, base, parts) <= C
        assert torch.equal(c.flat[parts.counters], u.flat[parts.counters])
        assert norm == pytest.approx(realised_norm(u.flat, base, parts), rel=1e-9)
        if norm <= C:
            assert torch.equal(c.flat, u.flat)
        else:  # the same direction, scaled to C
            assert realised_norm(c.flat, base, parts) == pytest.approx(C, rel=1e-5)
            m = parts.params | parts.stats
            cos = torch.nn.functional.cosine_similarity((c.flat - base)[m].to(F64), (u.flat - base)[m].to(F64), 0)
            assert float(cos) == pytest.approx(1.0, abs=1e-6)
    assert norms[1] < C and norms[0] > C and norms[-1] == pytest.approx(5.0 * math.sqrt(10))
    assert (ups[0].flat != clipped[0].flat).any()  # inputs untouched: a new tensor
    assert all(c.device == u.device and c.base_version == u.base_version for u, c in zip(ups, clipped))


def test_a_non_finite_update_is_a_zero_delta_and_a_broken_one_is_left_to_the_rules():
    parts, n = layout()
    base = model(n, parts, 0)
    bad = base + 1.0
    bad[3] = float("nan")
    short = torch.zeros(n - 1)
    clipped, norms = clip_updates([update(0, bad, 0), update(1, short, 0)], {0: base}.__getitem__, parts, 1.0)
    assert torch.equal(clipped[0].flat, base) and math.isnan(norms[0])
    assert clipped[1].flat is short and norms[1] is None
    result = fedbuff(config_from_dict({}, ["algorithm.name=fedbuff"]).algorithm, 0, base, clipped[:1],
                     {0: base}.__getitem__, parts)
    assert not result.info[0]["rejected"]  # |B| kept: the zero delta is aggregated


def test_a_delta_whose_rounding_errors_are_a_large_part_of_it_is_clipped_not_zeroed():
    """Weights ~3 (float32 ulp 2.4e-7) and a delta of norm 3C over 3000 entries (~0.02 each): the first scaling
    lands a few 1e-5 above C after rounding; the growing margin brings it within C, where a fixed one gave up."""
    parts, n = layout(n_params=3000, n_stats=0, n_counters=0)
    base = torch.randn(n, generator=torch.Generator().manual_seed(1)) * 3
    u = base / base.norm()
    for C in (0.4, 0.05, 1.0):
        (c,), norms = clip_updates([update(0, base + 3 * C * u, 0)], {0: base}.__getitem__, parts, C)
        assert C * 0.999 <= realised_norm(c.flat, base, parts) <= C and norms[0] == pytest.approx(3 * C, rel=1e-4)


def test_a_delta_far_below_the_models_scale_is_still_clipped_on_the_bits_the_rules_see():
    """float32 rounding of w_t + Δ̃ can lengthen Δ̃ by ulps of w: the realised norm is what is bounded."""
    parts, n = layout(n_params=5000, n_stats=0, n_counters=0)
    base = 1e3 * model(n, parts, 1)
    w = base + 1e-2 * torch.randn(n, generator=torch.Generator().manual_seed(2))
    for C in (1e-2, 1e-1, 0.3):
        (c,), _ = clip_updates([update(0, w, 0)], {0: base}.__getitem__, parts, C)
        assert realised_norm(c.flat, base, parts) <= C


# ---- sensitivity: tight on neighbouring buffers -----------------------------------------------------------------

CASES = {
    "fedbuff": (["algorithm.name=fedbuff", "algorithm.buffer_size=4", "algorithm.server_lr=1.5"],
                [(0, 0), (1, 2), (2, 1), (3, 3)], [10, 20, 30, 40]),
    "fedbuff_sqrt": (["algorithm.name=fedbuff", "algorithm.buffer_size=3", "algorithm.staleness_scaling=sqrt"],
                     [(0, 3), (1, 0), (2, 1)], [5, 5, 5]),
    "fedbuff_churn": (["algorithm.name=fedbuff", "algorithm.buffer_size=4"],  # device 1 twice in the buffer
                      [(0, 0), (1, 2), (1, 1), (3, 3)], [10, 20, 30, 40]),
    "fedasync": (["algorithm.name=fedasync", "algorithm.staleness_fn=hinge", "algorithm.hinge_b=1"],
                 [(0, 2)], [10]),
    "fedavg": (["algorithm.name=fedavg", "devices.concurrency=3", "algorithm.buffer_size=3"],
               [(0, 0), (1, 0), (2, 0)], [10, 50, 40]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_neighbouring_buffers_move_the_aggregate_by_s_within_one_percent(case):
    overrides, slots, n_samples = CASES[case]
    alg = config_from_dict({}, overrides).algorithm
    parts, n = layout()
    t, C = 4, 0.7
    bases = {v: model(n, parts, 100 + v) for v in range(t + 1)}
    staleness = [s for _, s in slots]
    devices = [d for d, _ in slots]
    S = sensitivity(alg, C, devices, staleness, n_samples)
    coefs = coefficients(alg, staleness, n_samples)
    per_device = {d: sum(c for dd, c in zip(devices, coefs) if dd == d) for d in devices}
    target = max(per_device, key=per_device.get)
    u = torch.randn(n, generator=torch.Generator().manual_seed(7))
    u[parts.counters] = 0
    u /= u.norm()

    def buffer(sign):
        ups = []
        for i, (d, s) in enumerate(slots):
            base = bases[t - s]
            if d == target:
                delta = sign * 3 * C * u  # longer than C: clipping makes it ±C·u
            else:
                delta = torch.randn(n, generator=torch.Generator().manual_seed(50 + i))
                delta[parts.counters] = 0
            ups.append(update(d, base + delta, t - s, n_samples[i], job=i))
        clipped, _ = clip_updates(ups, bases.__getitem__, parts, C)
        return RULES[alg.rule](alg, t, bases[t], clipped, bases.__getitem__, parts)

    one, other = buffer(+1), buffer(-1)
    assert [e["weight"] for e in one.info] == pytest.approx(coefs, rel=1e-12)  # c_i is the weight the rule records
    moved = float((one.new_global.to(F64) - other.new_global.to(F64)).norm())
    assert S > 0 and moved == pytest.approx(S, rel=0.01)


def test_sensitivity_of_the_simple_cases_in_closed_form():
    fb = config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.buffer_size=5"]).algorithm
    assert sensitivity(fb, 1.0, range(5), [0, 1, 2, 3, 4], [1] * 5) == pytest.approx(2 / 5)
    fa = config_from_dict({}, ["algorithm.name=fedasync", "algorithm.staleness_fn=constant"]).algorithm
    assert sensitivity(fa, 2.0, [7], [9], [1]) == pytest.approx(2 * 2.0 * 0.6)
    fv = config_from_dict({}, ["algorithm.name=fedavg"]).algorithm
    assert sensitivity(fv, 1.0, range(4), [0] * 4, [10, 10, 10, 10]) == pytest.approx(0.5)
    assert sensitivity(fb, 1.0, [], [], []) == 0.0
    with pytest.raises(ValueError, match="no sensitivity is derived for rule 'seafl'"):
        sensitivity(config_from_dict({}).algorithm, 1.0, [0], [0], [1])


# ---- noise ------------------------------------------------------------------------------------------------------

# The false-alarm rate of each statistical check below: two-sided, |Z| > 5.327 has probability 1e-7 for a standard
# normal Z, so the test, with its two checks (mean, variance), fails by chance with probability < 2e-7.
Z_1E7 = 5.327


def test_the_noise_per_coordinate_std_is_z_times_s_on_a_buffer_of_all_zero_deltas():
    parts, n = layout(n_params=150_000, n_stats=50_000, n_counters=20)
    alg = config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.buffer_size=4"]).algorithm
    w_t = model(n, parts, 3)
    ups = [update(d, w_t.clone(), 2) for d in range(4)]
    clipped, _ = clip_updates(ups, {2: w_t}.__getitem__, parts, 0.1)
    result = fedbuff(alg, 2, w_t, clipped, {2: w_t}.__getitem__, parts)
    assert torch.equal(result.new_global, w_t)
    z, S = 1.3, sensitivity(alg, 0.1, range(4), [0] * 4, [1] * 4)
    noisy = add_noise(result.new_global, z * S, parts.params | parts.stats, noise_seed(5, 2))
    m = parts.params | parts.stats
    e = noisy[m].to(F64) - w_t[m].to(F64)
    k, sigma = e.numel(), z * S
    assert abs(float(e.mean())) / (sigma / math.sqrt(k)) < Z_1E7
    var = float(e.var())  # (k−1)s²/σ² ~ χ²_{k−1}: s²/σ² − 1 has std √(2/(k−1)) (normal to 1e-3 at this k)
    assert abs(var / sigma ** 2 - 1) / math.sqrt(2 / (k - 1)) < Z_1E7
    assert torch.equal(noisy[parts.counters], w_t[parts.counters])  # counters take no noise


def test_the_noise_is_a_named_stream_of_the_run_keyed_by_the_aggregation():
    parts, n = layout()
    w = model(n, parts, 0)
    m = parts.params | parts.stats
    a, b = add_noise(w, 0.1, m, noise_seed(1, 3)), add_noise(w, 0.1, m, noise_seed(1, 3))
    assert torch.equal(a, b) and not torch.equal(a, add_noise(w, 0.1, m, noise_seed(1, 4)))
    assert not torch.equal(a, add_noise(w, 0.1, m, noise_seed(2, 3)))
    assert torch.equal(add_noise(w, 0.0, m, 0), w)


def test_batch_norm_running_variance_is_clamped_at_zero_after_the_noise():
    names = ["conv.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    sizes = [6, 2, 2, 2, 2, 1]
    mask = variance_mask(names, sizes)
    assert mask.tolist() == [False] * 12 + [True, True, False]
    flat = torch.tensor([-1.0] * 12 + [-0.5, 0.25, 3.0])
    out = clamp_variance(flat, mask)
    assert out.tolist() == [-1.0] * 12 + [0.0, 0.25, 3.0]
    assert clamp_variance(out, mask) is out  # nothing below 0: no copy


# ---- accountant -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["pld", "rdp"])
def test_epsilon_is_dp_accountings_for_the_same_composition_and_grows_with_m(kind):
    import dp_accounting
    z, delta = 1.1, 1e-5
    for m in (1, 3, 50):
        acc = (dp_accounting.pld.PLDAccountant() if kind == "pld" else dp_accounting.rdp.RdpAccountant())
        acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), m))
        assert epsilon(z, m, delta, kind) == acc.get_epsilon(delta)
    eps = [epsilon(z, m, delta, kind) for m in (0, 1, 2, 3, 5, 8, 13)]  # PLD: seconds a value
    assert eps[0] == 0.0 and all(a < b for a, b in zip(eps, eps[1:]))
    assert run_epsilon(z, [0, 4, 4, 17, 2], delta, kind) == epsilon(z, 17, delta, kind)
    assert epsilon(0.0, 1, delta, kind) == math.inf


def test_pld_is_the_gaussian_mechanisms_exact_epsilon_and_rdp_bounds_it():
    import dp_accounting
    for z, m in ((1.0, 1), (2.0, 10), (0.8, 30)):
        exact = dp_accounting.get_epsilon_gaussian(z / math.sqrt(m), 1e-5)  # m Gaussians = one with σ/√m
        assert epsilon(z, m, 1e-5) == pytest.approx(exact, rel=1e-3)
        assert epsilon(z, m, 1e-5, "rdp") >= exact


@pytest.mark.parametrize("target, m, kind", [(1.0, 1, "pld"), (4.0, 20, "pld"), (2.0, 10, "rdp"), (0.5, 3, "pld")])
def test_calibration_gives_the_smallest_z_whose_epsilon_is_within_the_target(target, m, kind):
    z = calibrate(target, m, 1e-5, kind)
    assert 0.99 * target <= epsilon(z, m, 1e-5, kind) <= target
    assert epsilon(z * 0.99, m, 1e-5, kind) > target  # a 1% smaller z spends more than the target


@pytest.mark.parametrize("args", [(0.0, 5, 1e-5), (-1.0, 5, 1e-5), (1.0, 0, 1e-5), (1.0, 5, 0.0), (1.0, 5, 1.0)])
def test_calibration_refuses_what_it_cannot_calibrate(args):
    with pytest.raises(ValueError, match="calibration needs"):
        calibrate(*args)


@pytest.mark.parametrize("z, m", [(0.01, 2), (0.03, 3), (1.0, 1000)])
def test_a_huge_epsilon_is_accounted_in_seconds_and_bounds_the_exact_one_within_a_thousandth(z, m):
    """Past ε = 50 the PLD's grid grows with ε (privacy/accountant.py ``pld_grid``): at z = 0.01 dp-accounting's
    default grid took 24 GiB, and the kernel killed the run. The answer stays an upper bound, and a tight one."""
    import time

    import dp_accounting
    started = time.monotonic()
    got = epsilon(z, m, 1e-5)
    assert time.monotonic() - started < 60
    exact = dp_accounting.get_epsilon_gaussian(z / math.sqrt(m), 1e-5)
    assert exact > 50 and exact <= got <= exact * 1.001
    assert got <= epsilon(z, m, 1e-5, "rdp")
    assert pld_grid(got) > 1e-4 == pld_grid(50.0) == pld_grid(0.5)


def test_importing_the_package_or_privacy_does_not_import_dp_accounting():
    code = "import sys, seafl_dist.privacy, seafl_dist.settings; sys.exit('dp_accounting' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---- the section ------------------------------------------------------------------------------------------------

ON = ["privacy.enabled=true", "algorithm.name=fedbuff"]


@pytest.mark.parametrize("overrides, key, allowed", [
    (["privacy.clipping_bound=0"], "privacy.clipping_bound", "a finite number > 0"),
    (["privacy.clipping_bound=-1"], "privacy.clipping_bound", "a finite number > 0"),
    (["privacy.noise_multiplier=-0.5"], "privacy.noise_multiplier", "a finite number >= 0"),
    (["privacy.delta=0"], "privacy.delta", "a number in (0, 1)"),
    (["privacy.delta=1"], "privacy.delta", "a number in (0, 1)"),
    (["privacy.epsilon=0"], "privacy.epsilon", "a finite number > 0"),
    (["privacy.max_participation=0"], "privacy.max_participation", "an integer >= 1"),
    (["privacy.accountant=prv"], "privacy.accountant", "one of pld, rdp"),
    (ON, "privacy.noise_multiplier", "or null with privacy.epsilon set"),
    (ON + ["privacy.noise_multiplier=1", "privacy.epsilon=2"], "privacy.epsilon", "give z, or the target ε"),
    (ON + ["privacy.epsilon=2"], "privacy.epsilon", "null without privacy.max_participation"),
    (ON + ["privacy.noise_multiplier=1", "algorithm.update_norm_factor=3"], "algorithm.update_norm_factor",
     "null with privacy.enabled=true"),
    (ON + ["privacy.noise_multiplier=1", "algorithm.server_opt.name=adam", "algorithm.server_opt.pseudo_gradient=delta"],
     "algorithm.server_opt.pseudo_gradient", "model with privacy.enabled=true"),
    (["privacy.enabled=true", "privacy.noise_multiplier=1", "algorithm.name=seafl_dist.algo.fedbuff:fedbuff"],
     "algorithm.name", "a rule of your own declares no sensitivity"),
    (ON + ["privacy.noise_multiplier=1", "data.device_holdout=0.2", "run.device_eval_every=2"], "run.device_eval_every",
     "null with privacy.enabled=true, or privacy.diagnostics=true"),
    (["privacy.enabled=true", "privacy.noise_multiplier=1", "algorithm.name=seafl2", "algorithm.alpha=0",
      "privacy.seafl_form=model"], "algorithm.alpha", "> 0 with privacy.seafl_form=model, or privacy.seafl_form=delta"),
    (ON + ["privacy.noise_multiplier=1", "data.shards_overlap=true"], "data.shards_overlap",
     "false with privacy.enabled=true (user-level adjacency"),
])
def test_bad_privacy_values_are_refused_in_one_line(overrides, key, allowed):
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, overrides)
    one_line_message(str(err.value), f"config key '{key}'", allowed)


@pytest.mark.parametrize("data, key", [
    ({"name": "hf:parquet", "files": {"train": "a.parquet", "test": "a.parquet"}}, "data.files"),
    ({"name": "hf:saved", "splits": {"test": "train"}}, "data.splits"),
    ({"name": "hf:saved", "splits": {"train": "all", "test": "all"}}, "data.splits"),
])
def test_under_dp_a_test_split_that_is_the_training_split_is_refused_in_one_line(data, key):
    """The central evaluation's accuracy is released un-noised: it may not be on the devices' own samples (issue 60
    D); the same data without DP, and a test split of its own under DP, are accepted."""
    with pytest.raises(ConfigError) as err:
        config_from_dict({"data": data}, ON + ["privacy.noise_multiplier=1"])
    one_line_message(str(err.value), f"config key '{key}'", "a test split other than the training split with "
                     "privacy.enabled=true")
    assert config_from_dict({"data": data}).data.name == data["name"]
    other = {**data, **({"files": {"train": "a.parquet", "test": "b.parquet"}} if "files" in data else
                        {"splits": {"train": "all", "test": "held"}})}
    assert config_from_dict({"data": other}, ON + ["privacy.noise_multiplier=1"]).privacy.enabled


def test_what_the_refusals_leave_open_is_accepted():
    """Each refusal's other side: device evaluation with privacy.diagnostics or without privacy; α = 0 with the
    delta form, or with the model form without privacy; the model form with α > 0."""
    held = ["data.device_holdout=0.2", "run.device_eval_every=2"]
    assert config_from_dict({}, ON + ["privacy.noise_multiplier=1", "privacy.diagnostics=true", *held]).privacy.withheld \
        is False
    assert config_from_dict({}, held).privacy.withheld is False
    assert config_from_dict({}, ON + ["privacy.noise_multiplier=1"]).privacy.withheld is True
    for extra in (["algorithm.alpha=0"], ["algorithm.alpha=0.01", "privacy.seafl_form=model"]):
        config_from_dict({}, ["privacy.enabled=true", "privacy.noise_multiplier=1", "algorithm.name=seafl", *extra])
    config_from_dict({}, ["algorithm.alpha=0", "privacy.seafl_form=model"])  # privacy off: no S to cover
    assert config_from_dict({}, ["data.shards_overlap=true"]).data.shards_overlap  # overlap without DP: accepted


def test_the_section_is_left_out_of_config_yaml_at_its_defaults_and_kept_when_set():
    assert "privacy" not in dump_config(config_from_dict({}))
    assert "privacy" not in dump_config(config_from_dict({}, ["privacy.enabled=false"]))
    on = config_from_dict({}, ON + ["privacy.noise_multiplier=0.9", "privacy.max_participation=20"])
    text = dump_config(on)
    assert "privacy:\n  enabled: true\n  clipping_bound: 1.0\n  noise_multiplier: 0.9\n" in text
    assert config_from_dict(__import__("yaml").safe_load(text)) == on
    for rule in ("fedasync", "fedavg"):
        assert config_from_dict({}, ["privacy.enabled=true", f"algorithm.name={rule}",
                                     "privacy.epsilon=4", "privacy.max_participation=5"]).privacy.enabled
