"""FADAS (Wang et al., ICML 2024) and delay-adaptive asynchronous SGD (Koloskova et al., Mishchenko et al., NeurIPS
2022) against their papers' equations written here in Python floats, one coordinate at a time, with no call into
seafl_dist/algo: AMSGrad's step (v̂ = max(v̂, v), this project's v̂_{−1} = τ², no bias correction), the delay rule
η_t = η for τ ≤ τ_C, min(η, c/τ) above, FedBuff's mean of the accepted deltas beneath FADAS; over sequences of
aggregations with the optimizer's state carried between them (Hypothesis: devices twice and never seen, stale
bases, non-finite and wrongly sized updates, K = 1 and K > 1); the state never written in place; a checkpoint
without v̂ loads; the preset's resolution and its refusals."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from seafl_dist.algo import BufferedUpdate, FlatParts, ServerOptimizer, ServerOptState, aggregate, optimizer_step
from seafl_dist.privacy.sensitivity import sensitivity
from seafl_dist.settings import AlgorithmConfig, ConfigError, config_from_dict, dump_config
from seafl_dist.settings.asyncsgd import AsyncSGDConfig
from seafl_dist.settings.server_opt import ServerOptConfig

F64 = torch.float64
DIM = 3


# ---- the papers' equations, here ---------------------------------------------------------------------

def delay_rule(eta, tau, tau_c, c):
    """Koloskova et al. 2022's delay-adaptive step (FADAS's Algorithm 2 with τ = τ_max): η up to τ_C, then
    min(η, c/τ)."""
    return eta if tau <= tau_c else min(eta, c / tau)


def amsgrad(x, m, v, vhat, delta, eta, beta1, beta2, tau):
    """One AMSGrad step per coordinate (Reddi, Kale and Kumar 2018, as FADAS's server runs it; this project's
    v̂_{−1} = v_{−1} = τ², τ outside the root, no bias correction): the new (x, m, v, v̂)."""
    m = [beta1 * mi + (1 - beta1) * d for mi, d in zip(m, delta)]
    v = [beta2 * vi + (1 - beta2) * d * d for vi, d in zip(v, delta)]
    vhat = [max(a, b) for a, b in zip(vhat, v)]
    x = [xi + eta * mi / (math.sqrt(vh) + tau) for xi, mi, vh in zip(x, m, vhat)]
    return x, m, v, vhat


def finite(vec):
    return len(vec) == DIM and all(math.isfinite(a) for a in vec)


def fadas_oracle(w0, buffers, eta, beta1, beta2, tau, tau_c, c):
    """FADAS over a sequence of buffers: FedBuff's mean Δ of the accepted deltas (η_g = 1), then AMSGrad at η_t
    for τ_max the largest accepted staleness; a buffer with none accepted takes no step (m, v, v̂ stay)."""
    models = [list(w0)]
    m, v, vhat = [0.0] * DIM, [tau * tau] * DIM, [tau * tau] * DIM
    for t, buffer in enumerate(buffers):
        x = models[t]
        ok = [(s, flat) for s, flat in buffer if finite(flat)]
        if not ok:
            models.append(list(x))
            continue
        mean = [sum(flat[i] - models[t - s][i] for s, flat in ok) / len(ok) for i in range(DIM)]
        eta_t = delay_rule(eta, max(s for s, _ in ok), tau_c, c)
        x, m, v, vhat = amsgrad(x, m, v, vhat, mean, eta_t, beta1, beta2, tau)
        models.append(x)
    return models


def asyncsgd_oracle(w0, buffers, eta, tau_c, c):
    """Asynchronous SGD: w_{t+1} = w_t + Σ_k η_k Δ_k over the accepted updates (one, with K = 1), η_k the delay
    rule of the update's own staleness."""
    models = [list(w0)]
    for t, buffer in enumerate(buffers):
        x = list(models[t])
        for s, flat in buffer:
            if finite(flat):
                eta_k = delay_rule(eta, s, tau_c, c)
                x = [xi + eta_k * (flat[i] - models[t - s][i]) for i, xi in enumerate(x)]
        models.append(x)
    return models


# ---- random buffers ----------------------------------------------------------------------------------

VALUE = st.floats(-2.0, 2.0, allow_nan=False, width=64)
KIND = st.sampled_from(["ok", "ok", "ok", "nan", "inf", "short"])


@st.composite
def sequences(draw, k_max):
    """A run's buffers: per aggregation t, K in 1..k_max updates, each (device, staleness ≤ t, delta, kind);
    devices drawn from 0..5 so some come twice (also in one buffer) and some never."""
    n = draw(st.integers(1, 5))
    out = []
    for t in range(n):
        k = draw(st.integers(1, k_max))
        out.append([(draw(st.integers(0, 5)), draw(st.integers(0, min(t, 3))), draw(st.lists(VALUE, min_size=DIM,
                     max_size=DIM)), draw(KIND)) for _ in range(k)])
    return out


def flat_of(base, delta, kind):
    flat = [b + d for b, d in zip(base, delta)]
    if kind == "nan":
        flat[0] = math.nan
    elif kind == "inf":
        flat[-1] = -math.inf
    elif kind == "short":
        flat = flat[:-1]
    return flat


def run_code(alg, w0, seq, snapshots=False):
    """The server's two stages (algo/dispatch.py's rule, algo/server_opt.py's optimizer) over ``seq``; the models
    and the (device, staleness, flat) buffers the oracles read. With ``snapshots``, each state before an aggregation
    is cloned and checked bitwise unchanged after it."""
    opt = ServerOptimizer(alg)
    models, buffers = [torch.tensor(w0, dtype=F64)], []
    for t, spec in enumerate(seq):
        ups, buf = [], []
        for j, (dev, s, delta, kind) in enumerate(spec):
            flat = flat_of(models[t - s].tolist(), delta, kind)
            ups.append(BufferedUpdate(device=dev, job=100 * t + j, flat=torch.tensor(flat, dtype=F64), n_samples=10,
                                      base_version=t - s, epochs=1))
            buf.append((s, flat))
        before = opt.state
        kept = {k: getattr(before, k).clone() for k in ("m", "v", "vmax") if getattr(before, k) is not None}
        result = aggregate(alg, t, models[t], ups, models.__getitem__)
        models.append(opt.apply(models[t], result, ups, models.__getitem__))
        if snapshots:
            for k, old in kept.items():
                assert torch.equal(getattr(before, k), old), f"aggregation {t} wrote the old state's {k} in place"
        buffers.append(buf)
    return [m.tolist() for m in models], buffers, opt


def fadas_alg(**opt):
    return AlgorithmConfig(name="fadas", buffer_size=4, server_opt=ServerOptConfig(**opt))


def asyncsgd_alg(**own):
    return AlgorithmConfig(name="asyncsgd", asyncsgd=AsyncSGDConfig(**own))


# ---- the oracles against the code --------------------------------------------------------------------

def test_the_delay_rule_is_eta_up_to_tau_c_then_min_eta_c_over_tau():
    from seafl_dist.algo.common import delay_lr
    cases = [(0.1, 0, 1, 1.0), (0.1, 1, 1, 1.0), (0.1, 2, 1, 1.0), (0.9, 2, 1, 1.0), (0.9, 5, 1, 1.0),
             (1.0, 20, 20, 0.5), (1.0, 21, 20, 0.5), (0.01, 7, 0, 0.01), (2.0, 3, 2, 9.0)]
    for eta, tau, tau_c, c in cases:
        assert delay_lr(eta, tau, tau_c, c) == delay_rule(eta, tau, tau_c, c), (eta, tau, tau_c, c)
    assert delay_lr(0.9, 5, 1, 1.0) == 0.2 and delay_lr(0.01, 7, 0, 0.01) == 0.01 / 7  # the official code's η/τ


@pytest.mark.parametrize("beta1, beta2, eta", [(0.9, 0.99, 0.01), (0.0, 0.5, 1.0), (0.5, 0.0, 0.03)])
def test_amsgrad_is_adam_with_the_running_maximum_of_v(beta1, beta2, eta):
    deltas = [[0.2, -1e-3, 0.0], [-0.05, 2e-3, 0.0], [1e-4, -1e-3, 0.3], [0.0, 0.0, -0.3], [0.01, 5e-4, 1e-3]]
    x, m, v, vhat = [1.0, -2.0, 0.5], [0.0] * 3, [1e-6] * 3, [1e-6] * 3
    state, got = ServerOptState(), torch.tensor(x, dtype=F64)
    for d in deltas:
        x, m, v, vhat = amsgrad(x, m, v, vhat, d, eta, beta1, beta2, 1e-3)
        step, state = optimizer_step("amsgrad", state, torch.tensor(d, dtype=F64), lr=eta, beta1=beta1,
                                     beta2=beta2, tau=1e-3)
        got = got + step
    assert got.tolist() == pytest.approx(x, rel=1e-13, abs=1e-15)
    assert state.vmax.tolist() == pytest.approx(vhat, rel=1e-13) and state.v.tolist() == pytest.approx(v, rel=1e-13)
    assert any(a > b for a, b in zip(vhat, v))  # v̂ kept a larger past v: the step is not Adam's


@settings(max_examples=40, deadline=None)
@given(seq=sequences(k_max=4), eta=st.sampled_from([0.01, 0.3, 1.0]), tau_c=st.integers(0, 2),
       c=st.sampled_from([1.0, 0.05]))
def test_fadas_is_fedbuff_then_amsgrad_at_the_delay_adaptive_eta(seq, eta, tau_c, c):
    w0 = [0.5, -1.0, 2.0]
    alg = fadas_alg(lr=eta, delay_threshold=tau_c, delay_c=c)
    got, buffers, opt = run_code(alg, w0, seq, snapshots=True)
    want = fadas_oracle(w0, buffers, eta, 0.9, 0.99, 1e-3, tau_c, c)
    for t, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-9, abs=1e-12), f"w_{t}"
    assert opt.state.steps == sum(any(finite(f) for _, f in b) for b in buffers)


@settings(max_examples=40, deadline=None)
@given(seq=sequences(k_max=1), more=sequences(k_max=4), eta=st.sampled_from([0.2, 1.0]),
       tau_c=st.integers(0, 2), c=st.sampled_from([1.0, 0.1]))
def test_asyncsgd_steps_each_update_by_its_own_delay_adaptive_eta(seq, more, eta, tau_c, c):
    w0 = [0.5, -1.0, 2.0]
    alg = asyncsgd_alg(lr=eta, tau_c=tau_c, c=c)
    for s in (seq, more):  # K = 1, as the config forces it, and a buffer of several
        got, buffers, _ = run_code(alg, w0, s)
        want = asyncsgd_oracle(w0, buffers, eta, tau_c, c)
        for t, (g, w) in enumerate(zip(got, want)):
            assert g == pytest.approx(w, rel=1e-9, abs=1e-12), f"w_{t}"


def test_asyncsgd_reports_each_updates_eta_as_its_weight():
    alg = asyncsgd_alg(lr=0.5, tau_c=1, c=0.6)
    models = [torch.zeros(2, dtype=F64)] * 4
    ups = [BufferedUpdate(device=d, job=d, flat=torch.ones(2, dtype=F64), n_samples=1, base_version=3 - s, epochs=1)
           for d, s in ((0, 0), (1, 2), (2, 3))]
    info = aggregate(alg, 3, models[3], ups, models.__getitem__).info
    assert [d["weight"] for d in info] == [0.5, 0.6 / 2, 0.6 / 3]  # η; min(0.5, 0.6/2); min(0.5, 0.6/3)


def test_the_delay_adaptive_eta_composes_with_every_optimizer():
    """momentum with β₁ = 0 is a plain step of η_t: one stale update (τ = 4 > τ_C = 1) steps by min(η, c/4)."""
    alg = AlgorithmConfig(name="fedbuff", server_opt=ServerOptConfig(name="momentum", lr=1.0, beta1=0.0,
                                                                      delay_adaptive=True, delay_threshold=1,
                                                                      delay_c=2.0))
    models = [torch.zeros(2, dtype=F64)] * 5
    ups = [BufferedUpdate(device=0, job=0, flat=torch.tensor([1.0, -2.0], dtype=F64), n_samples=1, base_version=0,
                          epochs=1), BufferedUpdate(device=1, job=1, flat=torch.tensor([1.0, -2.0], dtype=F64),
                                                    n_samples=1, base_version=4, epochs=1)]
    result = aggregate(alg, 4, models[4], ups, models.__getitem__)
    got = ServerOptimizer(alg).apply(models[4], result, ups, models.__getitem__)
    assert got.tolist() == pytest.approx([0.5, -1.0], rel=1e-14)  # τ_max = 4: η_t = min(1, 2/4)


def test_asyncsgd_carries_counters_from_the_accepted_updates_only():
    """w_t = (0, 0, 5) with entry 2 an integer counter; the accepted update (S = 0, η = 1) has 6 there, the rejected
    one (NaN elsewhere) 50: the counter is max(5, 6) = 6, the parameters w_t + Δ."""
    alg = asyncsgd_alg(lr=1.0, tau_c=1, c=1.0)
    counter = torch.tensor([False, False, True])
    parts = FlatParts(params=~counter, stats=torch.zeros(3, dtype=torch.bool), counters=counter)
    w = torch.tensor([0.0, 0.0, 5.0], dtype=F64)
    ups = [BufferedUpdate(device=0, job=0, flat=torch.tensor([1.0, -2.0, 6.0], dtype=F64), n_samples=1,
                          base_version=3, epochs=1),
           BufferedUpdate(device=1, job=1, flat=torch.tensor([math.nan, 0.0, 50.0], dtype=F64), n_samples=1,
                          base_version=3, epochs=1)]
    result = aggregate(alg, 3, w, ups, lambda v: w, parts)
    assert [d["rejected"] for d in result.info] == [False, True]
    assert result.new_global.tolist() == [1.0, -2.0, 6.0]


def test_asyncsgd_at_its_default_eta_adds_a_fresh_update_whole():
    """algorithm.asyncsgd.lr unset is η = 1: a fresh update's Δ is added as it is."""
    alg = config_from_dict({}, ["algorithm.name=asyncsgd"]).algorithm
    w = torch.tensor([0.5, -1.0], dtype=F64)
    ups = [BufferedUpdate(device=0, job=0, flat=torch.tensor([1.5, 1.0], dtype=F64), n_samples=1, base_version=2,
                          epochs=1)]
    assert aggregate(alg, 2, w, ups, lambda v: w).new_global.tolist() == [1.5, 1.0]


def test_the_delay_adaptive_tau_is_the_largest_accepted_staleness_not_a_rejected_ones():
    """Accepted S = 1 (≤ τ_C = 1: η), rejected S = 9 (would give min(η, c/9))."""
    opt = ServerOptimizer(fadas_alg(lr=0.5, delay_threshold=1, delay_c=1.0))
    info = [{"staleness": 1, "rejected": False}, {"staleness": 9, "rejected": True}]
    assert opt.lr_of(info) == 0.5


def test_amsgrads_first_step_keeps_v_hat_at_tau_squared_where_the_delta_is_smaller():
    """v̂_{−1} = τ²: Δ = (1e-4, 1) with τ = 1e-3, so v_0 < τ² on the first entry and v̂_0 = τ² there."""
    delta = [1e-4, 1.0]
    want, _, _, _ = amsgrad([0.0, 0.0], [0.0, 0.0], [1e-6, 1e-6], [1e-6, 1e-6], delta, 0.01, 0.9, 0.99, 1e-3)
    step, _ = optimizer_step("amsgrad", ServerOptState(), torch.tensor(delta, dtype=F64), lr=0.01, beta1=0.9,
                             beta2=0.99, tau=1e-3)
    assert step.tolist() == pytest.approx(want, rel=1e-12)


# ---- state and checkpoints ---------------------------------------------------------------------------

def test_a_checkpoint_without_vmax_loads_and_adams_holds_none():
    old = {"m": torch.tensor([0.1], dtype=F64), "v": torch.tensor([0.02], dtype=F64), "steps": 3}  # before amsgrad
    state = ServerOptState.from_dict(old)
    assert state.vmax is None and state.steps == 3 and torch.equal(state.m, old["m"])
    _, adam = optimizer_step("adam", state, torch.tensor([0.5], dtype=F64), lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    assert set(adam.to_dict()) == {"m", "v", "steps"}  # another optimizer's checkpoint holds what it held
    _, ams = optimizer_step("amsgrad", state, torch.tensor([0.5], dtype=F64), lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    back = ServerOptState.from_dict(ams.to_dict())
    assert torch.equal(back.vmax, ams.vmax) and back.vmax.item() == max(1e-6, 0.02 * 0.99 + 0.25 * (1 - 0.99))


# ---- the config: the preset, what config.yaml records, refusals --------------------------------------

def test_fadas_resolves_to_fedbuff_with_amsgrad_and_the_delay_adaptive_eta():
    alg = config_from_dict({}, ["algorithm.name=fadas"]).algorithm
    opt = alg.server_opt
    assert (alg.rule, opt.name, opt.lr, opt.delay_adaptive, opt.delay_threshold, opt.delay_c) == \
        ("fedbuff", "amsgrad", 0.01, True, 1, 1.0)
    assert alg.staleness_limit is None
    text = dump_config(config_from_dict({}, ["algorithm.name=fadas"]))
    assert "    name: amsgrad\n    lr: 0.01\n" in text and "delay_adaptive: true\n    delay_threshold: 1\n    " \
        "delay_c: 1.0\n" in text
    over = config_from_dict({}, ["algorithm.name=fadas", "algorithm.server_opt.lr=0.003",
                                 "algorithm.server_opt.delay_adaptive=false", "algorithm.server_opt.beta2=0.9"])
    assert (over.algorithm.server_opt.lr, over.algorithm.server_opt.delay_adaptive,
            over.algorithm.server_opt.beta2) == (0.003, False, 0.9)
    import yaml
    again = dump_config(config_from_dict(yaml.safe_load(text)))
    assert again == text  # config.yaml reloads to itself


def test_the_new_keys_are_left_out_of_config_yaml_at_their_defaults():
    assert "server_opt" not in dump_config(config_from_dict({})) and "asyncsgd:" not in dump_config(config_from_dict({}))
    adam = dump_config(config_from_dict({}, ["algorithm.server_opt.name=adam"]))
    assert "delay" not in adam
    assert "asyncsgd:\n    lr: 1.0\n    tau_c: 7\n    c: 1.0\n" in dump_config(
        config_from_dict({}, ["algorithm.name=asyncsgd", "devices.concurrency=7", "algorithm.asyncsgd.lr=1.0"]))


def test_no_optimizer_takes_delay_adaptive_false_given_explicitly():
    opt = config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.server_opt.delay_adaptive=false"]).algorithm
    assert (opt.server_opt.name, opt.server_opt.delay_adaptive) == ("none", False)


def test_asyncsgd_takes_one_update_at_a_time_and_tau_c_defaults_to_the_concurrency():
    alg = config_from_dict({}, ["algorithm.name=asyncsgd", "algorithm.buffer_size=5", "devices.concurrency=6"]).algorithm
    assert (alg.buffer_size, alg.asyncsgd.tau_c, alg.staleness_limit) == (1, 6, None)
    assert config_from_dict({}, ["algorithm.name=asyncsgd", "algorithm.asyncsgd.tau_c=2"]).algorithm.asyncsgd.tau_c == 2


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.name=fadas", "algorithm.server_opt.name=adam"],
     "'algorithm.server_opt.name' has value 'adam'; allowed: amsgrad (or not given) with algorithm.name=fadas"),
    (["algorithm.name=fedbuff", "algorithm.server_opt.delay_adaptive=true"],
     "'algorithm.server_opt.delay_adaptive' has value True; allowed: false or null with algorithm.server_opt.name=none"),
    (["algorithm.name=asyncsgd", "algorithm.server_opt.name=momentum"],
     "'algorithm.server_opt.name' has value 'momentum'; allowed: none with algorithm.name=asyncsgd"),
    (["algorithm.name=fadas", "algorithm.server_lr=0.5"],
     "'algorithm.server_lr' has value 0.5; allowed: 1.0 with algorithm.server_opt.name=amsgrad"),
    (["algorithm.server_opt.delay_threshold=-1"], "'algorithm.server_opt.delay_threshold' has value -1"),
    (["algorithm.server_opt.delay_c=0"], "'algorithm.server_opt.delay_c' has value 0"),
    (["algorithm.asyncsgd.c=-1"], "'algorithm.asyncsgd.c' has value -1"),
    (["algorithm.asyncsgd.c=0"], "'algorithm.asyncsgd.c' has value 0"),  # η_t = 0 above τ_C: no step at all
    (["algorithm.asyncsgd.tau_c=1.5"], "'algorithm.asyncsgd.tau_c' has value 1.5"),
    (["algorithm.asyncsgd.lr=0"], "'algorithm.asyncsgd.lr' has value 0"),
])
def test_bad_input_is_refused_in_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


# ---- under DP ----------------------------------------------------------------------------------------

def test_under_dp_asyncsgds_sensitivity_is_twice_c_times_its_eta_and_fadas_is_fedbuffs():
    dp = ["privacy.enabled=true", "privacy.noise_multiplier=1", "privacy.clipping_bound=0.5"]
    alg = config_from_dict({}, ["algorithm.name=asyncsgd", "devices.concurrency=4", "algorithm.asyncsgd.lr=0.8",
                                *dp]).algorithm
    assert sensitivity(alg, 0.5, [3], [2], [10]) == pytest.approx(2 * 0.5 * 0.8)  # S ≤ τ_C = 4: η
    assert sensitivity(alg, 0.5, [3], [10], [10]) == pytest.approx(2 * 0.5 * min(0.8, 1.0 / 10))
    fadas = config_from_dict({}, ["algorithm.name=fadas", "algorithm.buffer_size=4", *dp]).algorithm
    assert sensitivity(fadas, 0.5, [0, 1, 2, 3], [0, 1, 5, 2], [1] * 4) == pytest.approx(2 * 0.5 / 4)
