"""Port as PLATO's examples/async/port/port_server.py computes it (algorithm.name: port), against its algorithm written
again here: numbers worked by hand, and an oracle in plain Python floats run over sequences of aggregations with its
own memory of the global models it was called with (Hypothesis: stale bases, devices seen twice or never, rejected
and non-finite updates, K = 1 and K > 1, lags 1 to 3). The oracle calls nothing in seafl_dist/algo.

PLATO's weight of update k at round r (current model w_t, t = r − 1; S_k = t − t_k; Δ_k = w_k − w_t):
    c_k = cos(Δ_k, w_t − w_{t−L}) if S_k > 1 and w_{t−L} was seen, else 1
    r_k = n_k/Σn · ((c_k + 1)/2 + b/(S_k + b)),   p_k = r_k / Σr,   w_{t+1} = w_t + Σ p_k Δ_k
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from seafl_dist.algo import BufferedUpdate, FlatParts, ServerOptimizer, aggregate, memory_of
from seafl_dist.settings import AlgorithmConfig, ConfigError
from seafl_dist.settings.core import load_config
from seafl_dist.settings.port import PortConfig
from rule_states import broken
from small_runs import QUICKSTART

T = torch.tensor


def port_cfg(b=10.0, lag=1, **kw):
    return AlgorithmConfig(name="port", port=PortConfig(b=b, lag=lag), **kw)


def up(device, base, flat, n):
    return BufferedUpdate(device=device, job=device, flat=T(flat, dtype=torch.float32), n_samples=n,
                          base_version=base, epochs=1)


class Run:
    """Aggregations carried as the server carries them: one RuleMemory, the global models by version."""

    def __init__(self, cfg, w0, parts=None):
        self.cfg, self.memory, self.parts = cfg, memory_of(cfg), parts
        self.versions, self.t = {0: T(w0, dtype=torch.float32)}, 0

    def step(self, updates):
        res = aggregate(self.cfg, self.t, self.versions[self.t], updates, self.versions.__getitem__, self.parts,
                        memory=self.memory)
        self.t += 1
        self.versions[self.t] = res.new_global
        return res


# ---- by hand ----------------------------------------------------------------------------------------------------

def hand_sequence(lag):
    """Three aggregations worked by hand (b = 10); the third's stale delta is orthogonal to w_t − w_{t−L}. ``lag``
    None: algorithm.port.lag unset, whose default is L = 1."""
    run = Run(port_cfg(lag=lag) if lag is not None else AlgorithmConfig(name="port"), [0.0, 0.0])
    # t = 0: S = 0, so c = 1: r = 1·(1 + 10/10) = 2, p = 1; w_1 = [2, 0]
    first = run.step([up(0, 0, [2.0, 0.0], 1)])
    # t = 1: B (S = 1, c = 1, n = 1): r = 1/4·(1 + 10/11) = 21/44; C (S = 0, n = 3): r = 3/4·2 = 66/44
    # p_B = 21/87 = 7/29, p_C = 22/29; Δ_B = [−2, 4], Δ_C = [2, 0]: w_2 = [2 + 30/29, 28/29] = [88/29, 28/29]
    second = run.step([up(1, 0, [0.0, 4.0], 1), up(0, 1, [4.0, 0.0], 3)])
    # t = 2: D (S = 2 > 1) has Δ_D ⟂ the movement (L = 1: w_2 − w_1 = [30, 28]/29;
    # L = 2: w_2 − w_0 = [88, 28]/29),
    # so c = 0: r_D = 1/2·(1/2 + 10/12) = 2/3; E (S = 0): r_E = 1/2·2 = 1; p_D = 2/5, p_E = 3/5
    delta_d = [28.0, -30.0] if lag in (1, None) else [28.0, -88.0]
    w2 = [88 / 29, 28 / 29]
    third = run.step([up(2, 0, [w2[0] + delta_d[0], w2[1] + delta_d[1]], 1), up(3, 2, [w2[0] - 2, w2[1] + 1], 1)])
    return run, (first, second, third), delta_d


@pytest.mark.parametrize("lag", [1, 2, None])
def test_three_aggregations_worked_by_hand(lag):
    run, (first, second, third), delta_d = hand_sequence(lag)
    assert [d["weight"] for d in first.info] == [1.0] and run.versions[1].tolist() == [2.0, 0.0]
    assert [d["weight"] for d in second.info] == pytest.approx([7 / 29, 22 / 29], abs=1e-12)
    assert [d["cos"] for d in second.info] == [1.0, 1.0]  # S ≤ 1: the similarity is 1, no cosine
    assert run.versions[2].tolist() == pytest.approx([88 / 29, 28 / 29], abs=1e-6)
    assert [d["weight"] for d in third.info] == pytest.approx([2 / 5, 3 / 5], abs=1e-9)
    assert third.info[0]["cos"] == pytest.approx(0.0, abs=1e-6) and third.info[1]["cos"] == 1.0
    w3 = [88 / 29 + 0.4 * delta_d[0] - 0.6 * 2, 28 / 29 + 0.4 * delta_d[1] + 0.6]
    assert run.versions[3].tolist() == pytest.approx(w3, abs=1e-5)


def test_a_delta_against_the_movement_counts_only_its_staleness_factor():
    """cos = −1: (c + 1)/2 = 0, so the stale update's raw weight is n/Σn · b/(S + b) alone (L = 1, b = 10)."""
    run, _, _ = hand_sequence(1)
    move = (run.versions[3] - run.versions[2]).tolist()
    w3 = run.versions[3].tolist()
    res = run.step([up(0, 1, [w3[0] - move[0] / 2, w3[1] - move[1] / 2], 1), up(4, 3, [w3[0] + 1, w3[1] + 1], 1)])
    # F: S = 2, r_F = 1/2·(0 + 10/12) = 5/12; G: S = 0, r_G = 1/2·2 = 1; p_F = 5/17, p_G = 12/17
    assert res.info[0]["cos"] == pytest.approx(-1.0, abs=1e-6)
    assert [d["weight"] for d in res.info] == pytest.approx([5 / 17, 12 / 17], abs=1e-6)


def test_the_cosine_runs_over_the_trainable_parameters_only():
    """A float statistic (entry 2) along the movement would make the full-vector cosine positive; over the
    parameters the stale delta is orthogonal to it, c = 0 (PLATO's runs over the whole state_dict)."""
    stats = T([False, False, True])
    parts = FlatParts(params=~stats, stats=stats, counters=torch.zeros(3, dtype=torch.bool))
    run = Run(port_cfg(), [0.0, 0.0, 0.0], parts)
    run.step([up(0, 0, [1.0, 0.0, 5.0], 1)])  # w_1 = [1, 0, 5]
    run.step([up(1, 1, [2.0, 0.0, 6.0], 1)])  # w_2 = [2, 0, 6]: movement over the params [1, 0]
    res = run.step([up(2, 0, [2.0, 3.0, 9.0], 1)])  # S = 2, Δ = [0, 3, 3]: ⟂ [1, 0] over the params
    assert res.info[0]["cos"] == pytest.approx(0.0, abs=1e-12)


# ---- the oracle -------------------------------------------------------------------------------------------------

def oracle(t, w_t, updates, b, lag, params, seen):
    """PLATO's Port in Python floats. ``updates``: (flat or None if rejected, n, base); ``seen``: the oracle's own
    {version: w} of the global models it was called with (updated here). Returns (w_{t+1}, weights, cosines)."""
    previous = seen.get(t - lag)
    seen[t] = list(w_t)
    for v in [v for v in seen if v <= t - lag]:
        del seen[v]
    kept = [(i, flat, n, t - base) for i, (flat, n, base) in enumerate(updates) if flat is not None]
    weights, cosines = [0.0] * len(updates), [None] * len(updates)
    total = sum(n for _, _, n, _ in kept)
    if not kept or total <= 0:
        return list(w_t), weights, cosines
    raw, deltas = {}, {}
    for i, flat, n, S in kept:
        deltas[i] = [a - c for a, c in zip(flat, w_t)]
        c = 1.0
        if S > 1 and previous is not None:
            x = [d for d, p in zip(deltas[i], params) if p]
            y = [a - c for a, c, p in zip(w_t, previous, params) if p]
            xx, yy = math.sqrt(sum(v * v for v in x)), math.sqrt(sum(v * v for v in y))
            c = 0.0 if xx == 0 or yy == 0 else sum(a * c for a, c in zip(x, y)) / (xx * yy)
        cosines[i] = c
        raw[i] = n / total * ((c + 1) / 2 + b / (S + b))
    norm = sum(raw.values())
    out = list(w_t)
    for i in raw:
        weights[i] = raw[i] / norm
        out = [o + weights[i] * d for o, d in zip(out, deltas[i])]
    return out, weights, cosines


D = 5  # entries: 4 trainable parameters, then one float statistic (in no cosine)
VALUE = st.floats(-4, 4, allow_nan=False, width=32)
UPDATE = st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 30),
                   st.sampled_from(["ok", "ok", "ok", "nan", "inf", "size"]), st.lists(VALUE, min_size=D, max_size=D))
BUFFERS = st.lists(st.lists(UPDATE, min_size=1, max_size=4), min_size=1, max_size=6)


@given(BUFFERS, st.lists(VALUE, min_size=D, max_size=D), st.sampled_from([1, 2, 3]),
       st.sampled_from([0.5, 10.0, 200.0]))
def test_port_matches_the_oracle_over_sequences_and_never_writes_its_old_state(buffers, w0, lag, b):
    stats = T([False] * 4 + [True])
    parts = FlatParts(params=~stats, stats=stats, counters=torch.zeros(D, dtype=torch.bool))
    run, seen = Run(port_cfg(b=b, lag=lag), w0, parts), {}
    for buffer in buffers:
        t = run.t
        updates, plain = [], []
        for device, back, n, kind, delta in buffer:
            base = max(0, t - back)  # a stale base: up to 3 versions back
            flat = [w + d for w, d in zip(run.versions[base].tolist(), delta)]
            flat = broken(flat, kind, device % D)
            updates.append(up(device, base, flat, n))
            plain.append((T(flat, dtype=torch.float32).tolist() if kind == "ok" else None, n, base))
        old = run.memory.state
        snapshot = {v: w.clone() for v, w in old.get("models", {}).items()}
        res = run.step(updates)
        want, weights, cosines = oracle(t, run.versions[t].tolist(), plain, b, lag, [True] * 4 + [False], seen)
        assert res.new_global.tolist() == pytest.approx(want, rel=1e-4, abs=1e-4)
        assert [d["weight"] for d in res.info] == pytest.approx(weights, rel=1e-5, abs=1e-6)
        assert [d["cos"] for d in res.info] == pytest.approx(cosines, abs=1e-5)
        assert [d["rejected"] for d in res.info] == [p[0] is None for p in plain]
        # the state before this aggregation: its mapping and every tensor as they were (bitwise), nothing written
        assert sorted(old.get("models", {})) == sorted(snapshot)
        assert all(torch.equal(old["models"][v], w) for v, w in snapshot.items())
        # the new state: the last L models the rule was called with, the server's tensors themselves (no copy)
        models = run.memory.state["models"]
        assert sorted(models) == sorted(seen) == list(range(max(0, t - lag + 1), t + 1))
        assert all(models[v] is run.versions[v] for v in models)


def test_an_aggregation_whose_every_update_was_rejected_still_remembers_w_t():
    """An aggregation whose every update was rejected leaves w_{t+1} = w_t and pushes w_t into the state, so the
    movement seen later is the server's own (here w_2 − w_1 = 0: the cosine with a zero vector is 0)."""
    run = Run(port_cfg(), [0.0, 0.0])
    run.step([up(0, 0, [1.0, 1.0], 1)])
    rejected = run.step([up(1, 0, [math.nan, 0.0], 1)])
    assert rejected.info[0]["rejected"] and torch.equal(run.versions[2], run.versions[1])
    assert sorted(run.memory.state["models"]) == [1]  # called at t = 1: w_1 kept (L = 1)
    res = run.step([up(2, 0, [3.0, 4.0], 1)])  # S = 2, movement w_2 − w_1 = 0
    assert res.info[0]["cos"] == 0.0


# ---- keys and refusals ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, allowed", [("algorithm.port.b=0", "> 0"), ("algorithm.port.lag=0", "[1, 16]"),
                                               ("algorithm.port.lag=17", "[1, 16]"),
                                               ("algorithm.port.b=.inf", "finite")])
def test_a_bad_port_key_is_refused_in_one_line_naming_it(override, allowed):
    with pytest.raises(ConfigError) as err:
        load_config(QUICKSTART, ["algorithm.name=port", override])
    text = str(err.value)
    assert "\n" not in text and f"'{override.split('=')[0]}'" in text and allowed in text


def test_port_under_privacy_is_refused_in_one_line_naming_algorithm_name():
    with pytest.raises(ConfigError) as err:
        load_config(QUICKSTART, ["algorithm.name=port", "privacy.enabled=true", "privacy.noise_multiplier=1.0"])
    text = str(err.value)
    assert "\n" not in text and "'algorithm.name' has value 'port'" in text and "drift" in text


@pytest.mark.parametrize("form, step", [("model", [30 / 29, 28 / 29]), ("delta", [44 / 29, 28 / 29])])
def test_port_takes_the_server_optimizers_in_both_forms_with_its_weights_as_coefficients(form, step):
    """w′ = Σ p_k w_k, so the delta form steps on Σ p_k (w_k − w_{t_k}); momentum at β₁ = 0, lr = 1 takes that
    step once. The hand sequence's t = 1: p_B = 7/29 (from w_0, [0, 4]), p_C = 22/29 (from w_1 = [2, 0], [4, 0]):
    model form w′ − w_1 = [30, 28]/29; delta form 7/29·[0, 4] + 22/29·[2, 0] = [44, 28]/29."""
    cfg = load_config(QUICKSTART, ["algorithm.name=port", "algorithm.server_opt.name=momentum",
                                   "algorithm.server_opt.beta1=0", "algorithm.server_opt.lr=1",
                                   f"algorithm.server_opt.pseudo_gradient={form}"]).algorithm
    run = Run(cfg, [0.0, 0.0])
    run.step([up(0, 0, [2.0, 0.0], 1)])  # w′ = [2, 0]: both forms step by [2, 0] from w_0
    optimizer = ServerOptimizer(cfg)
    versions = {0: T([0.0, 0.0]), 1: T([2.0, 0.0])}
    updates = [up(1, 0, [0.0, 4.0], 1), up(0, 1, [4.0, 0.0], 3)]
    res = aggregate(cfg, 1, versions[1], updates, versions.__getitem__, memory=run.memory)
    new = optimizer.apply(versions[1], res, updates, versions.__getitem__)
    assert (new - versions[1]).tolist() == pytest.approx(step, abs=1e-6)


def test_the_port_section_is_left_out_of_config_yaml_at_its_defaults():
    from seafl_dist.settings.core import dump_config
    assert "port:" not in dump_config(load_config(QUICKSTART, ["algorithm.name=port"]))
    assert "  port:\n    b: 3.0\n    lag: 2\n" in dump_config(load_config(QUICKSTART, [
        "algorithm.name=port", "algorithm.port.b=3", "algorithm.port.lag=2"]))
