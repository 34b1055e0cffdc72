"""The server optimizers (algorithm.server_opt, algo/server_opt.py) against Reddi et al.'s Algorithm 2 and
Hsu et al.'s FedAvgM transcribed here line by line in Python floats, one coordinate at a time, on fixed
pseudo-gradients; what they step on (the trainable parameters; the model or the delta form); no step when
every update was rejected; the rules between their config keys (each key's own values: test_config.py and
test_config_domains.py)."""
import math

import pytest
import torch

from seafl_dist.algo import AggregationResult, BufferedUpdate, FlatParts, ServerOptimizer, ServerOptState, aggregate
from seafl_dist.algo import optimizer_step
from seafl_dist.runtime.dryrun import non_default
from seafl_dist.settings import AlgorithmConfig, ConfigError, config_from_dict, dump_config
from seafl_dist.settings.server_opt import ServerOptConfig

T = torch.tensor
# Δ_t per step, three coordinates: large and small steps, a zero, sign changes, so that Yogi's
# sign(v − Δ²) takes both signs and 0, and τ (1e-3) matters against |Δ| ~ 1e-3
DELTAS = [[0.2, -1e-3, 0.0], [-0.05, 2e-3, 0.0], [1e-4, -1e-3, 0.3], [0.0, 0.0, -0.3], [0.01, 5e-4, 1e-3]]


def sign(x):
    return (x > 0) - (x < 0)


def reddi_algorithm_2(name, deltas, x, eta, beta1, beta2, tau):
    """Algorithm 2 (FedAdagrad, FedYogi, FedAdam) as printed: v_{-1} = τ², m_{-1} = 0, no bias correction."""
    x, m, v = list(x), [0.0] * len(x), [tau ** 2] * len(x)
    for delta in deltas:
        for i, d in enumerate(delta):
            m[i] = beta1 * m[i] + (1 - beta1) * d
            if name == "adagrad":
                v[i] = v[i] + d ** 2
            elif name == "yogi":
                v[i] = v[i] - (1 - beta2) * d ** 2 * sign(v[i] - d ** 2)
            else:
                v[i] = beta2 * v[i] + (1 - beta2) * d ** 2
            x[i] = x[i] + eta * m[i] / (math.sqrt(v[i]) + tau)
    return x


def fedavgm(deltas, x, eta, beta):
    """FedAvgM (Hsu et al. 2019; Flower's FedAvgM): v = βv + Δw with Δw = w_t − w′ = −Δ, w = w − η v."""
    x, v = list(x), [0.0] * len(x)
    for delta in deltas:
        for i, d in enumerate(delta):
            v[i] = beta * v[i] + (-d)
            x[i] = x[i] - eta * v[i]
    return x


def ours(name, deltas, x, **hyper):
    x, state = T(x, dtype=torch.float64), ServerOptState()
    for delta in deltas:
        step, state = optimizer_step(name, state, T(delta, dtype=torch.float64), **hyper)
        x = x + step
    return x.tolist(), state


@pytest.mark.parametrize("name", ["adam", "yogi", "adagrad"])
@pytest.mark.parametrize("beta1, beta2, eta", [(0.9, 0.99, 0.1), (0.0, 0.5, 1.0), (0.5, 0.0, 0.03)])
def test_adaptive_optimizers_are_reddi_et_al_algorithm_2(name, beta1, beta2, eta):
    x0 = [1.0, -2.0, 0.5]
    got, state = ours(name, DELTAS, x0, lr=eta, beta1=beta1, beta2=beta2, tau=1e-3)
    assert got == pytest.approx(reddi_algorithm_2(name, DELTAS, x0, eta, beta1, beta2, 1e-3), rel=1e-13, abs=1e-15)
    assert state.steps == len(DELTAS) and state.m.dtype == state.v.dtype == torch.float64


def test_adam_is_not_torch_adam():
    """torch.optim.Adam bias-corrects and starts v at 0: its first step moves every coordinate by about η."""
    step, _ = optimizer_step("adam", ServerOptState(), T([0.1], dtype=torch.float64), lr=1.0, beta1=0.9,
                             beta2=0.99, tau=1e-3)
    paper = (1 - 0.9) * 0.1 / (math.sqrt(0.99 * 1e-6 + 0.01 * 0.01) + 1e-3)  # 0.01 / 0.01100 ≈ 0.905
    assert step.item() == pytest.approx(paper, rel=1e-14)
    assert abs(step.item() - 0.1 / (0.1 + 1e-3)) > 0.05  # what bias correction would give


@pytest.mark.parametrize("beta, eta", [(0.9, 1.0), (0.0, 0.5), (0.5, 0.1)])
def test_momentum_is_fedavgm(beta, eta):
    x0 = [1.0, -2.0, 0.5]
    got, state = ours("momentum", DELTAS, x0, lr=eta, beta1=beta, beta2=0.99, tau=1e-3)
    assert got == pytest.approx(fedavgm(DELTAS, x0, eta, beta), rel=1e-13, abs=1e-15)
    assert state.v is None


def test_a_step_changes_neither_its_inputs_nor_the_state_it_was_given():
    delta, state = T([0.1, -0.2], dtype=torch.float64), ServerOptState()
    _, s1 = optimizer_step("adam", state, delta, lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    m1, v1 = s1.m.clone(), s1.v.clone()
    optimizer_step("adam", s1, delta, lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    assert torch.equal(s1.m, m1) and torch.equal(s1.v, v1) and delta.tolist() == [0.1, -0.2]
    assert state.m is None and state.steps == 0


# ---- the stage: what it steps on -------------------------------------------------------------

def cfg(rule="fedbuff", **opt):
    return AlgorithmConfig(name=rule, server_opt=ServerOptConfig(**opt))


def result(new, *rejected):
    return AggregationResult(T(new), [{"weight": 0.0 if r else 1.0, "rejected": r} for r in rejected or [False]])


def test_none_is_the_rules_result_itself():
    res = result([1.0, 2.0])
    assert ServerOptimizer(cfg()).apply(T([0.0, 0.0]), res, [], None) is res.new_global


def test_the_step_is_taken_in_float64_and_rounded_once_to_w_ts_dtype():
    w_t, new = T([0.1, 0.2, 0.3]), T([0.3, 0.1, 0.3])
    delta = (new.double() - w_t.double()).tolist()  # Δ of the float32 models, exact in float64
    x = reddi_algorithm_2("adam", [delta], w_t.double().tolist(), 0.05, 0.9, 0.99, 1e-3)
    got = ServerOptimizer(cfg(name="adam", lr=0.05)).apply(w_t, result(new.tolist()), [], None)
    assert got.dtype == torch.float32 and torch.equal(got, T(x, dtype=torch.float64).float())


def test_only_trainable_parameters_move_statistics_and_counters_take_the_rules_values():
    parts = FlatParts(params=T([True, True, False, False]), stats=T([False, False, True, False]),
                      counters=T([False, False, False, True]))
    opt = ServerOptimizer(cfg(name="momentum", lr=2.0, beta1=0.0), parts)
    got = opt.apply(T([1.0, 1.0, 0.5, 7.0]), result([2.0, 0.0, 0.75, 9.0]), [], None)
    assert got.tolist() == [3.0, -1.0, 0.75, 9.0]  # w_t + 2·(w′ − w_t) on the parameters; w′ elsewhere
    assert opt.state.m.numel() == 2


def test_an_aggregation_whose_every_update_was_rejected_takes_no_step():
    opt = ServerOptimizer(cfg(name="momentum", lr=1.0, beta1=0.9))
    w1 = opt.apply(T([0.0, 0.0]), result([1.0, -1.0]), [], None)
    m, steps = opt.state.m, opt.state.steps
    still = result([1.0, -1.0], True, True)  # the rule gives back w_t
    assert opt.apply(w1, still, [], None) is still.new_global  # momentum would have moved it by 0.9·m
    assert opt.state.m is m and opt.state.steps == steps == 1


def test_a_buffer_of_non_finite_updates_leaves_the_model_where_it_is():
    opt, w_t = ServerOptimizer(cfg(name="adam")), T([0.5, 0.5])
    opt.apply(w_t, result([1.0, 0.0]), [], None)
    nan = BufferedUpdate(0, 0, T([float("nan"), 0.0]), 10, 1, 1)
    res = aggregate(cfg(name="adam"), 1, w_t, [nan], {1: w_t}.__getitem__)
    assert torch.equal(opt.apply(w_t, res, [nan], {1: w_t}.__getitem__), w_t) and opt.state.steps == 1


# SEAFL at t = 3 on w_3 = [1, 1, 1], with two updates from w_1 (S = 2) and w_3 (S = 0)
VERSIONS = {1: T([0.0, 2.0, 1.0]), 3: T([1.0, 1.0, 1.0])}
UPDATES = [BufferedUpdate(0, 0, T([0.5, 2.5, 0.0]), 30, 1, 2), BufferedUpdate(1, 1, T([2.0, 1.0, 3.0]), 10, 3, 2)]


def first_delta(rule, form):
    """Δ_0 the optimizer saw: momentum with β₁ = 0 and η = 1 steps by Δ itself."""
    c = cfg(rule, name="momentum", lr=1.0, beta1=0.0, pseudo_gradient=form)
    res = aggregate(c, 3, VERSIONS[3], UPDATES, VERSIONS.__getitem__)
    opt = ServerOptimizer(c)
    opt.apply(VERSIONS[3], res, UPDATES, VERSIONS.__getitem__)
    return opt.state.m, res


def test_delta_form_is_seafls_eq_8_on_the_deltas_and_leaves_out_the_servers_drift():
    model, res = first_delta("seafl", "model")
    delta, _ = first_delta("seafl", "delta")
    theta = 0.8
    # p_k by Eq. 4–6 (α = 3, β = 10, μ = 1): S = 2 and 0; Θ of Δ_k = [0.5, 0.5, −1] and [1, 0, 2]
    # with w_3 = [1, 1, 1]
    raw = [30 / 40 * (3 * 10 / 12 + (0 / math.sqrt(1.5 * 3) + 1) / 2), 10 / 40 * (3 + (3 / math.sqrt(5 * 3) + 1) / 2)]
    p = [r / sum(raw) for r in raw]
    assert [d["weight"] for d in res.info] == pytest.approx(p, rel=1e-9)
    deltas = [u.flat.double() - VERSIONS[u.base_version].double() for u in UPDATES]
    drifts = [VERSIONS[3].double() - VERSIONS[u.base_version].double() for u in UPDATES]
    assert torch.allclose(delta, theta * (p[0] * deltas[0] + p[1] * deltas[1]), rtol=0, atol=1e-12)
    # w′ − w_t = ϑ Σ p_k Δ_k − ϑ Σ p_k (w_t − w_{t_k}) (float32 w′: 1e-7)
    assert torch.allclose(model, delta - theta * (p[0] * drifts[0] + p[1] * drifts[1]), rtol=0, atol=1e-6)
    assert not torch.allclose(model, delta, atol=1e-3)


def test_delta_form_of_fedasync_fedbuff_and_fedavg():
    one = UPDATES[:1]
    delta0 = T([0.5, 0.5, -1.0], dtype=torch.float64)  # w_k − w_1 of the update from w_1 (S = 2)
    for rule, expected in (("fedasync", lambda r: 0.6 * 3 ** -0.5 * delta0),  # a = α_mix (1 + S)^−½
                           ("fedbuff", lambda r: delta0)):  # η_g = 1, one update, no scaling
        c = cfg(rule, name="momentum", lr=1.0, beta1=0.0, pseudo_gradient="delta")
        res = aggregate(c, 3, VERSIONS[3], one, VERSIONS.__getitem__)
        opt = ServerOptimizer(c)
        opt.apply(VERSIONS[3], res, one, VERSIONS.__getitem__)
        assert torch.allclose(opt.state.m, expected(res), rtol=0, atol=1e-6), rule
    fresh = [BufferedUpdate(k, k, u.flat, u.n_samples, 3, 2) for k, u in enumerate(UPDATES)]  # FedAvg: all from w_t
    for form in ("model", "delta"):
        c = cfg("fedavg", name="momentum", lr=1.0, beta1=0.0, pseudo_gradient=form)
        res = aggregate(c, 3, VERSIONS[3], fresh, VERSIONS.__getitem__)
        opt = ServerOptimizer(c)
        opt.apply(VERSIONS[3], res, fresh, VERSIONS.__getitem__)
        # Σ n_k/Σn (w_k − w_3) = (30·[−0.5, 1.5, −1] + 10·[1, 0, 2]) / 40
        assert torch.allclose(opt.state.m, T([-0.125, 1.125, -0.25], dtype=torch.float64), rtol=0, atol=1e-6)


def test_state_round_trips_through_a_checkpoints_plain_dict():
    opt = ServerOptimizer(cfg(name="yogi"))
    opt.apply(T([0.0, 0.0]), result([0.1, -0.2]), [], None)
    again = ServerOptimizer(cfg(name="yogi"))
    again.load_state_dict(opt.state_dict())
    assert torch.equal(again.state.m, opt.state.m) and torch.equal(again.state.v, opt.state.v)
    assert again.state.steps == 1 and ServerOptimizer(cfg()).state_dict() is None


def test_a_rejected_update_takes_no_part_in_the_delta_form():
    nan = BufferedUpdate(2, 2, T([float("nan"), 0.0, 0.0]), 10, 1, 2)  # the value check rejects it
    c = cfg("fedbuff", name="momentum", lr=1.0, beta1=0.0, pseudo_gradient="delta")
    alone = aggregate(c, 3, VERSIONS[3], UPDATES[:1], VERSIONS.__getitem__)
    res = aggregate(c, 3, VERSIONS[3], [UPDATES[0], nan], VERSIONS.__getitem__)
    assert [bool(d.get("rejected")) for d in res.info] == [False, True]
    opt = ServerOptimizer(c)
    opt.apply(VERSIONS[3], res, [UPDATES[0], nan], VERSIONS.__getitem__)
    assert torch.allclose(opt.state.m, alone.new_global.double() - VERSIONS[3].double(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["momentum", "adam"])
def test_the_state_moves_to_the_pseudo_gradients_device(name):
    """A checkpoint holds the state on the CPU; a run resumed on a GPU steps on a CUDA Δ. The meta device
    stands in for the GPU: a CPU m or v added to it raises."""
    hyper = dict(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    _, state = optimizer_step(name, ServerOptState(), T([0.1, -0.2], dtype=torch.float64), **hyper)
    step, after = optimizer_step(name, state, torch.zeros(2, dtype=torch.float64, device="meta"), **hyper)
    assert step.device.type == after.m.device.type == "meta"
    assert after.v is None if name == "momentum" else after.v.device.type == "meta"


def test_an_unknown_optimizer_is_named_in_the_error():
    with pytest.raises(ValueError, match="unknown server optimizer 'sgd'; allowed: momentum, adam, yogi, adagrad"):
        optimizer_step("sgd", ServerOptState(), T([0.1], dtype=torch.float64), lr=1.0, beta1=0.9, beta2=0.99, tau=1e-3)


def test_the_states_plain_dict_before_any_step_and_without_a_step_count():
    assert ServerOptState().to_dict() == {"m": None, "v": None, "steps": 0}
    assert ServerOptState.from_dict(None).steps == 0 and ServerOptState.from_dict(None).m is None
    m = T([0.5], dtype=torch.float64)
    old = ServerOptState.from_dict({"m": m, "v": None})  # a dict without "steps": none taken
    assert old.m is m and old.v is None and old.steps == 0
    assert ServerOptState(m, None, 4).to_dict() == {"m": m, "v": None, "steps": 4}


# ---- config ----------------------------------------------------------------------------------

def test_defaults_leave_config_yaml_as_it_was_and_an_optimizer_is_written_whole():
    assert "server_opt" not in dump_config(config_from_dict({}))
    text = dump_config(config_from_dict({}, ["algorithm.server_opt.name=yogi"]))
    assert "  server_opt:\n    name: yogi\n    lr: 0.01\n    beta1: 0.9\n    beta2: 0.99\n    tau: 0.001\n" in text
    assert config_from_dict({}, ["algorithm.server_opt.name=adam", "algorithm.server_opt.lr=null"]).algorithm \
        .server_opt.lr == 0.1
    changed = non_default(config_from_dict({}, ["algorithm.server_opt.name=yogi"]))  # `seafl run --dry-run`'s list
    assert changed == ["  algorithm.server_opt.name = yogi", "  algorithm.server_opt.lr = 0.01"]


def test_fedbuffs_server_lr_is_folded_into_the_optimizers_lr_not_multiplied():
    with pytest.raises(ConfigError, match="'algorithm.server_lr' has value 0.5; allowed: 1.0 with algorithm.server_opt"):
        config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.server_lr=0.5", "algorithm.server_opt.name=adam"])
    config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.server_lr=0.5"])  # no optimizer: η_g as ever


def test_the_delta_form_needs_an_optimizer_and_a_built_in_rule(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="pseudo_gradient' has value 'delta'; allowed: model with .*=none"):
        config_from_dict({}, ["algorithm.server_opt.pseudo_gradient=delta"])
    (tmp_path / "rules_i40.py").write_text("def mean(cfg, version, global_flat, updates, base_model):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="allowed: model with a rule of your own"):
        config_from_dict({}, ["algorithm.name=rules_i40:mean", "algorithm.server_opt.name=adam",
                              "algorithm.server_opt.pseudo_gradient=delta"])
    config_from_dict({}, ["algorithm.name=rules_i40:mean", "algorithm.server_opt.name=adam"])
