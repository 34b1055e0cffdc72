"""privacy/mechanism.py, the object the server calls in place of the rule under DP (issue 42 A): S over the updates
the rule kept, one inclusion per device per aggregation, a non-finite update a zero delta that still counts, the
noise's std z·S on the model the rule made, the variance clamped, the ledger through a checkpoint, and
privacy.enabled: false the rule itself."""
import hashlib
import math
from types import SimpleNamespace

import pytest
import torch

from seafl_dist.algo import aggregate
from seafl_dist.algo.types import BufferedUpdate, FlatParts
from seafl_dist.privacy import (Mechanism, NoPrivacy, add_noise, calibrate, clamp_variance, epsilon, mechanism_of,
                                noise_seed, sensitivity, variance_mask)
from seafl_dist.settings import config_from_dict

N_PARAMS, N_STATS = 20_000, 4  # the statistics: one batch norm's running mean (2) and running variance (2)
LAYOUT = SimpleNamespace(names=("fc.weight", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"),
                         shapes=((N_PARAMS,), (2,), (2,), ()))
N = N_PARAMS + N_STATS + 1
KIND = torch.tensor([0] * N_PARAMS + [1] * N_STATS + [2])
PARTS = FlatParts(KIND == 0, KIND == 1, KIND == 2)
Z, C = 1.5, 0.5


def config(*extra, noise="privacy.seeded_noise=true"):
    """The mechanism's config; seeded noise (these tests are about S, the ledger and what is released, and one checks
    the exact draws), ``noise=None``: the default keyed noise."""
    return config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.buffer_size=3", "devices.concurrency=4",
                                 "privacy.enabled=true", f"privacy.noise_multiplier={Z}",
                                 f"privacy.clipping_bound={C}", *([noise] if noise else []), *extra])


def global_model():
    w = torch.zeros(N)
    w[N_PARAMS + 2:N_PARAMS + 4] = 1e-6  # running variances just above 0: the noise drives one below
    w[-1] = 7.0
    return w


def update(device, flat, base=0, job=0):
    return BufferedUpdate(device=device, job=job, flat=flat, n_samples=10, base_version=base, epochs=1)


def run(mech, ups, version=0, w=None):
    w = global_model() if w is None else w
    ev = {"updates": [{"device": u.device} for u in ups]}
    cfg = config()
    result = mech.aggregate(ev, cfg.algorithm, version, w, ups, {0: w}.__getitem__, PARTS, None)
    return ev, result, w


def test_s_runs_over_the_updates_the_rule_kept_and_a_device_counts_once_per_aggregation():
    mech = Mechanism(config(), PARTS, LAYOUT, say=False)
    w = global_model()
    ups = [update(1, w + 0.01), update(1, w - 0.01, job=1), update(2, torch.zeros(N - 3), job=2)]  # the last: broken
    ev, result, _ = run(mech, ups, w=w)
    assert [i["rejected"] for i in result.info] == [False, False, True]
    s = sensitivity(config().algorithm, C, [1, 1], [0, 0], [10, 10])
    assert ev["privacy"]["sensitivity"] == s == pytest.approx(2 * C * (0.5 + 0.5))  # device 1's two updates
    assert ev["privacy"]["noise_std"] == Z * s
    assert dict(mech.inclusions) == {1: 1}  # device 2's broken upload is no inclusion; device 1 once
    assert ev["privacy"]["max_inclusions"] == 1 and ev["privacy"]["epsilon"] == epsilon(Z, 1, 1e-5)
    run(mech, [update(1, w), update(3, w, job=3), update(4, w, job=4)], version=1)
    assert dict(mech.inclusions) == {1: 2, 3: 1, 4: 1}
    assert mech.summary()["privacy"]["max_inclusions"] == 2 and mech.summary()["privacy"]["devices_included"] == 3


def test_a_non_finite_update_is_a_zero_delta_and_still_an_inclusion():
    mech = Mechanism(config("privacy.diagnostics=true"), PARTS, LAYOUT, say=False)
    w = global_model()
    bad = w.clone()
    bad[5] = math.nan
    ev, result, _ = run(mech, [update(1, bad), update(2, w + 1.0, job=1), update(3, w, job=2)], w=w)
    assert not any(i["rejected"] for i in result.info)
    assert dict(mech.inclusions) == {1: 1, 2: 1, 3: 1}
    assert (mech.zeroed, mech.clipped, ev["privacy"]["clipped"]) == (1, 1, 1)  # w + 1 has norm 141 > C


def test_without_diagnostics_the_clip_count_is_not_released_and_info_keeps_public_keys():
    """The clip count is a function of the un-noised deltas; the default writes none of it (docs/privacy.md)."""
    for rule, public in (("fedbuff", {"weight", "rejected", "reason", "staleness"}),
                         ("seafl", {"rejected", "reason", "staleness", "gamma"})):
        mech = Mechanism(config(f"algorithm.name={rule}"), PARTS, LAYOUT, say=False)
        w = global_model()
        bad = w.clone()
        bad[5] = math.nan
        ev = {"updates": [{"device": d} for d in (1, 2, 3)]}
        ups = [update(1, bad), update(2, w + 1.0, job=1), update(3, w + 0.001, job=2)]
        result = mech.aggregate(ev, config(f"algorithm.name={rule}").algorithm, 0, w, ups, {0: w}.__getitem__, PARTS)
        assert set(ev["privacy"]) == {"sensitivity", "noise_std", "epsilon", "max_inclusions"}
        assert [set(i) for i in result.info] == [public] * 3
        assert (mech.zeroed, mech.clipped) == (1, 1)  # counted for the checkpoint, never written
        assert "updates_clipped" not in mech.summary()["privacy"] and "updates_zeroed" not in mech.summary()["privacy"]
        assert mech.released_log({"loss": 0.3}) is None
    diag = Mechanism(config("privacy.diagnostics=true"), PARTS, LAYOUT, say=False)
    assert diag.released_log({"loss": 0.3}) == {"loss": 0.3} and NoPrivacy.released_log({"loss": 1}) == {"loss": 1}


def test_the_noise_on_the_rules_model_has_std_z_s_and_the_variance_is_clamped():
    mech = Mechanism(config(), PARTS, LAYOUT, say=False)
    w = global_model()
    ev, result, _ = run(mech, [update(d, w.clone(), job=d) for d in range(3)], w=w)  # all-zero deltas
    rule = aggregate(config().algorithm, 0, w, [update(d, w.clone(), job=d) for d in range(3)], {0: w}.__getitem__,
                     PARTS)
    e = (result.new_global - rule.new_global)[PARTS.params].to(torch.float64)
    sigma = ev["privacy"]["noise_std"]
    assert sigma == pytest.approx(Z * 2 * C / 3)
    k = e.numel()  # |Z| > 5.327: probability 1e-7 for each of the two checks
    assert abs(float(e.mean())) / (sigma / math.sqrt(k)) < 5.327
    assert abs(float(e.var()) / sigma ** 2 - 1) / math.sqrt(2 / (k - 1)) < 5.327
    var = result.new_global[N_PARAMS + 2:N_PARAMS + 4]
    assert bool((var >= 0).all()) and bool((var == 0).any())  # σ = 0.5 ≫ 1e-6: at least one was clamped
    assert result.new_global[-1] == 7.0  # the counter takes no noise


def test_the_ledger_goes_through_a_checkpoint_and_a_missing_one_is_refused():
    mech = Mechanism(config(), PARTS, LAYOUT, say=False)
    w = global_model()
    run(mech, [update(1, w), update(2, w + 1.0, job=1), update(3, w, job=2)], w=w)
    again = Mechanism(config(), PARTS, LAYOUT, say=False)
    again.load(mech.state())
    assert (again.inclusions, again.clipped, again.zeroed) == (mech.inclusions, mech.clipped, mech.zeroed)
    assert again.summary() == mech.summary()
    with pytest.raises(ValueError, match="^the checkpoint has no privacy ledger, and this run has privacy.enabled: true$"):
        again.load(None)


def test_the_announcement_says_z_c_delta_and_the_bound_or_that_there_is_none(capsys):
    Mechanism(config("privacy.max_participation=4", noise=None), PARTS, LAYOUT)
    line = capsys.readouterr().err.splitlines()[0]
    assert line == (f"seafl: privacy: z 1.5, C 0.5, δ 1e-05, pld; m <= 4 per device, so ε <= "
                    f"{epsilon(Z, 4, 1e-5):.4g}")
    Mechanism(config(noise=None), PARTS, LAYOUT)
    assert capsys.readouterr().err.splitlines()[0] == ("seafl: privacy: z 1.5, C 0.5, δ 1e-05, pld; no cap: ε grows "
                                                       "with the most-included device's m, reported as the run goes")
    rdp = Mechanism(config_from_dict({}, ["algorithm.name=fedbuff", "privacy.enabled=true", "privacy.epsilon=3",
                                          "privacy.max_participation=4", "privacy.accountant=rdp"]), PARTS, LAYOUT)
    assert rdp.z == calibrate(3.0, 4, 1e-5, "rdp") != calibrate(3.0, 4, 1e-5, "pld")
    assert capsys.readouterr().err.splitlines()[0].endswith(
        f"rdp; m <= 4 per device, so ε <= {epsilon(rdp.z, 4, 1e-5, 'rdp'):.4g}")


def test_every_dp_run_starts_by_saying_n_k_is_public_by_assumption_and_how_to_make_it_reveal_nothing(capsys):
    """The line after the announcement (issue 60 D): n_k's status, and data.samples_per_device; none without DP."""
    Mechanism(config(noise=None), PARTS, LAYOUT)  # keyed (the default): its key's line comes at open()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("seafl: privacy: z 1.5")
    assert lines[1].startswith("seafl: privacy: n_k") and "public by assumption" in lines[1]
    assert "clock" in lines[1] and "partition.json" in lines[1] and "data.samples_per_device" in lines[1]
    off = SimpleNamespace(cfg=config_from_dict({}, ["algorithm.name=fedbuff"]))
    assert isinstance(mechanism_of(off, LAYOUT), NoPrivacy) and capsys.readouterr().err == ""


def test_without_privacy_the_rule_itself_and_nothing_reported():
    w = global_model()
    ups = [update(d, w + 0.1 * d, job=d) for d in range(3)]
    ev = {"updates": []}
    cfg = config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.buffer_size=3", "devices.concurrency=4"])
    got = NoPrivacy().aggregate(ev, cfg.algorithm, 0, w, ups, {0: w}.__getitem__, PARTS)
    assert torch.equal(got.new_global, aggregate(cfg.algorithm, 0, w, ups, {0: w}.__getitem__, PARTS).new_global)
    assert ev == {"updates": []} and NoPrivacy.summary() == {} and NoPrivacy.state() is None
    assert NoPrivacy.note("devices p10 0.5") == "devices p10 0.5"


def test_counters_are_w_ts_and_the_noise_is_aggregation_ts_draw_of_the_stream():
    """Under DP the counters are w_t's whatever the uploads say, and the noise of aggregation t = version + 1
    is the stream 'privacy' keyed by t; the result's norms are the clipped deltas' the guard history sees."""
    mech = Mechanism(config(), PARTS, LAYOUT, say=False)
    w = global_model()
    ups = []
    for d, steps in ((1, 2.0), (2, 4.0), (3, 3.0)):
        u = w.clone()
        u[:N_PARAMS] += 0.001 * d
        u[-1] = 7.0 + steps
        ups.append(update(d, u, job=d))
    from seafl_dist.algo.guard import NormHistory
    ev = {"updates": [{"device": u.device} for u in ups]}
    result = mech.aggregate(ev, config().algorithm, 4, w, ups, {0: w}.__getitem__, PARTS, NormHistory())
    assert result.new_global[-1] == 7.0  # w_t's: no upload's counter (9, 11, 10) is released under DP
    rule = aggregate(config().algorithm, 4, w, ups, {0: w}.__getitem__, PARTS)
    assert rule.new_global[-1] == 11.0  # the rule alone: the largest counter, not 7 + the mean of the steps
    rule.new_global[-1] = 7.0
    mask = PARTS.params | PARTS.stats
    want = clamp_variance(add_noise(rule.new_global, ev["privacy"]["noise_std"], mask, noise_seed(0, 5)),
                          variance_mask(LAYOUT.names, [N_PARAMS, 2, 2, 1]))
    assert torch.equal(result.new_global, want)
    assert result.norms == pytest.approx([0.001 * d * math.sqrt(N_PARAMS) for d in (1, 2, 3)], rel=1e-5)


def test_the_summary_and_the_progress_note_say_what_was_spent():
    mech = Mechanism(config("privacy.accountant=rdp", "privacy.delta=1e-6", "privacy.max_participation=9",
                            "privacy.diagnostics=true", noise=None), PARTS, LAYOUT, say=False)
    mech.key = b"k" * 32  # what open() gives it (a test of the keyed noise: test_privacy_keys.py)
    assert mech.note(None) == "ε 0 (m 0)" and mech.note("devices p10 0.5") == "devices p10 0.5 · ε 0 (m 0)"
    w = global_model()
    bad = w.clone()
    bad[0] = math.inf
    run(mech, [update(1, w + 1.0), update(2, bad, job=1), update(3, w, job=2)], w=w)
    run(mech, [update(1, w), update(4, w, job=3), update(5, w, job=4)], version=1)
    eps = epsilon(Z, 2, 1e-6, "rdp")
    assert mech.note(None) == f"ε {eps:.3g} (m 2)"
    assert mech.summary() == {"privacy": {
        "epsilon": eps, "max_inclusions": 2, "delta": 1e-6, "noise_multiplier": Z, "clipping_bound": C,
        "accountant": "rdp", "max_participation": 9, "target_epsilon": None, "devices_included": 5,
        "noise": "keyed", "key_fingerprint": hashlib.sha256(b"seafl-dp-key-fingerprint\0" + b"k" * 32).hexdigest()[:16],
        "updates_clipped": 1, "updates_zeroed": 1}}


def test_a_target_epsilon_is_calibrated_at_construction_and_announced(capsys):
    mech = Mechanism(config_from_dict({}, ["algorithm.name=fedbuff", "privacy.enabled=true", "privacy.epsilon=3",
                                           "privacy.max_participation=4"]), PARTS, LAYOUT)
    assert mech.calibrated and mech.z == calibrate(3.0, 4, 1e-5)
    assert f"z {mech.z:.6g} (calibrated to ε 3), C 1," in capsys.readouterr().err
    assert mech.summary()["privacy"]["target_epsilon"] == 3.0 and not Mechanism(config(), PARTS, LAYOUT,
                                                                                  say=False).calibrated


def test_mechanism_of_follows_privacy_enabled():
    def exp(*extra):
        return SimpleNamespace(cfg=config_from_dict({}, ["algorithm.name=fedbuff", *extra]), flat_parts=lambda: PARTS)
    assert isinstance(mechanism_of(exp(), LAYOUT), NoPrivacy)
    got = mechanism_of(exp("privacy.enabled=true", "privacy.noise_multiplier=0.7"), LAYOUT)
    assert isinstance(got, Mechanism) and got.z == 0.7 and got.active and not NoPrivacy.active


def test_secure_noise_is_n_0_1_from_os_urandom_and_never_the_same_twice():
    """privacy/noise.py secure_normal: four Box-Muller draws from 53-bit uniforms, halved. Its mean and variance
    are a standard normal's (|Z| > 5.327: probability 1e-7 each), its tails reach past 4σ at this size, and
    add_noise without a seed draws afresh each call."""
    from seafl_dist.privacy.noise import secure_normal
    k = 400_000
    x = secure_normal(k)
    assert x.dtype == torch.float64 and x.shape == (k,) and bool(torch.isfinite(x).all())
    assert abs(float(x.mean())) / (1 / math.sqrt(k)) < 5.327
    assert abs(float(x.var()) - 1) / math.sqrt(2 / (k - 1)) < 5.327
    assert abs(float(((x - x.mean()) ** 4).mean()) / float(x.var()) ** 2 - 3) < 0.1  # a Gaussian's kurtosis
    assert float(x.abs().max()) > 4.0
    w = torch.zeros(1000)
    mask = torch.ones(1000, dtype=torch.bool)
    first, second = add_noise(w, 0.5, mask, None), add_noise(w, 0.5, mask, None)
    assert not torch.equal(first, second)
    assert torch.equal(add_noise(w, 0.5, mask, 7), add_noise(w, 0.5, mask, 7))  # seeded: the same bits
    assert secure_normal(0).shape == (0,)


def test_the_divergence_line_names_the_jobs_without_their_norms_under_dp():
    """runtime/watch.py: the un-noised norms stay off stderr unless privacy.diagnostics; without DP they are said."""
    from seafl_dist.runtime.watch import Watch, _aggregations
    ev = {"version": 3, "time": 9.5, "updates": [{"device": 4, "job": 11}, {"device": 7, "job": 12, "rejected": False}]}
    said = {}
    for name, extra in (("dp", ["privacy.enabled=true", "privacy.noise_multiplier=1"]),
                        ("diagnostics", ["privacy.enabled=true", "privacy.noise_multiplier=1", "privacy.diagnostics=true"]),
                        ("plain", [])):
        watch = Watch(SimpleNamespace(cfg=config_from_dict({}, ["algorithm.name=fedbuff", *extra]),
                                      test=SimpleNamespace(labels=None)))
        watch.aggregated(ev, [0.25, 4.0])
        said[name] = _aggregations(watch.recent)
    assert said["dp"] == "the aggregation since the evaluation before it: aggregation 3 at 9.5 s: device 4 job 11, device 7 job 12"
    assert "norm 0.25" in said["plain"] and "norm 4" in said["plain"] and said["diagnostics"] == said["plain"]
