"""The defenses that read the server-held set (``algorithm.defense.server_samples``): the set itself
(data/server_set.py), FLTrust against an implementation written here from the paper, on buffers Hypothesis generates,
and every refusal at both sides of its edge.

Oracle, FLTrust (Cao, Fang, Liu and Gong, NDSS 2021, Eqs. 1-4; Algorithm 1): with the server update g_0,
TS_i = ReLU(cos(g_i, g_0)), ḡ_i = (‖g_0‖/‖g_i‖) g_i, g = Σ_i TS_i ḡ_i / Σ_j TS_j (here 0 when every TS is 0, and a
zero vector scores 0), the global step w′ = w_t + η g. Cosines and norms over the trainable parameters.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from seafl_dist.algo import BufferedUpdate, FlatParts, aggregate, memory_of
from seafl_dist.data.dataset import ArrayDataset
from seafl_dist.data.server_set import server_rows, server_set
from defense_configs import config, refused
from seafl_dist.settings import ConfigError

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T = 5


class GivenUpdate:
    """A server whose update at (version, w_t) is a given vector, recording what it was asked for."""

    def __init__(self, g0):
        self.g0, self.asked = g0, []

    def update(self, version, global_flat):
        self.asked.append((version, global_flat.clone()))
        return self.g0.clone()


@st.composite
def buffers(draw, counters=False):
    """(w_t, bases, updates, parts, g_0): whole-number entries, bases at versions T − 2 .. T."""
    n = draw(st.integers(1, 9))
    d = draw(st.integers(2, 6)) + (2 if counters else 0)
    ints = st.integers(-20, 20)
    bases = {v: [float(draw(ints)) for _ in range(d)] for v in range(T - 2, T + 1)}
    if counters:
        for v in bases:
            bases[v][-1] = float(10 + v)
    updates = []
    for k in range(n):
        v = draw(st.integers(T - 2, T))
        delta = [float(draw(st.integers(-8, 8))) for _ in range(d)]
        if counters:
            delta[-1] = float(draw(st.integers(1, 4)))
        updates.append(BufferedUpdate(device=k, job=k, n_samples=draw(st.integers(1, 50)), base_version=v, epochs=1,
                                      flat=torch.tensor([b + x for b, x in zip(bases[v], delta)])))
    g0 = [float(draw(st.integers(-8, 8))) for _ in range(d)]
    parts = None
    if counters:
        parts = FlatParts(torch.tensor([True] * (d - 2) + [False, False]),
                          torch.tensor([False] * (d - 2) + [True, False]), torch.tensor([False] * (d - 1) + [True]))
        g0[-1] = 1.0
    return torch.tensor(bases[T]), {v: torch.tensor(w) for v, w in bases.items()}, updates, parts, torch.tensor(g0)


def oracle_fltrust(deltas, g0, idx):
    """The paper's aggregate g over every entry (the scores and norms over ``idx``), and each TS_i."""
    def dot(a, b):
        return sum(a[i] * b[i] for i in idx)
    g_norm = math.sqrt(dot(g0, g0))
    scores, rescaled = [], []
    for x in deltas:
        r = math.sqrt(dot(x, x))
        scores.append(0.0 if r == 0 or g_norm == 0 else max(0.0, dot(x, g0) / (r * g_norm)))
        rescaled.append([0.0] * len(x) if r == 0 else [g_norm / r * e for e in x])
    total = sum(scores)
    if total == 0:
        return [0.0] * len(g0), scores
    return [sum(s * v[c] for s, v in zip(scores, rescaled)) / total for c in range(len(g0))], scores


def memory_with(cfg, server):
    memory = memory_of(cfg.algorithm)
    memory.server = server
    return memory


# ---- FLTrust -------------------------------------------------------------------------------------------------

@SETTINGS
@given(buffers(counters=True), st.sampled_from([1.0, 0.5]), st.sampled_from(["none", "sqrt"]))
def test_fltrust_is_the_papers_trust_weighted_mean_of_the_rescaled_deltas(buf, lr, scaling):
    """FedBuff's staleness scale c_k multiplies x_k and cancels in the rescaling to ‖g_0‖: the result does not
    depend on it."""
    w_t, bases, updates, parts, g0 = buf
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=fltrust", "algorithm.defense.server_samples=10",
                 f"algorithm.server_lr={lr}", f"algorithm.staleness_scaling={scaling}", k=len(updates))
    server = GivenUpdate(g0)
    result = aggregate(cfg.algorithm, T, w_t, updates, bases.__getitem__, parts,
                       memory=memory_with(cfg, server))
    assert len(server.asked) == 1 and server.asked[0][0] == T and torch.equal(server.asked[0][1], w_t)
    d = w_t.numel()
    deltas = [[a - b for a, b in zip(u.flat.tolist(), bases[u.base_version].tolist())] for u in updates]
    est, scores = oracle_fltrust(deltas, g0.tolist(), [i for i in range(d) if bool(parts.params[i])])
    want = [w + lr * e for w, e in zip(w_t.tolist(), est)]
    want[-1] = max([w_t[-1].item()] + [u.flat[-1].item() for u in updates])  # the counter: the largest
    assert torch.allclose(result.new_global, torch.tensor(want), rtol=1e-6, atol=1e-5)
    assert [i["trust"] for i in result.info] == pytest.approx(scores, abs=1e-12)
    # each weight is the coefficient of Δ_k in the step: Σ_k weight_k Δ_k is the step over the parameters
    step = [sum(i["weight"] * x[c] for i, x in zip(result.info, deltas)) for c in range(d - 1)]
    assert step == pytest.approx([lr * e for e in est[:d - 1]], abs=1e-6)


def test_fltrust_gives_w_t_when_every_update_points_away_from_g0():
    w_t = torch.zeros(3)
    updates = [BufferedUpdate(device=k, job=k, n_samples=1, base_version=T, epochs=1,
                              flat=torch.tensor([-1.0 - k, 0.0, 0.0])) for k in range(3)]
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=fltrust", "algorithm.defense.server_samples=1",
                 k=3)
    result = aggregate(cfg.algorithm, T, w_t, updates, {T: w_t}.__getitem__, None,
                       memory=memory_with(cfg, GivenUpdate(torch.tensor([1.0, 0.0, 0.0]))))
    assert torch.equal(result.new_global, w_t)
    assert [i["trust"] for i in result.info] == [0.0] * 3 and [i["weight"] for i in result.info] == [0.0] * 3
    # one update at 90° scores 0 (ReLU's edge), one just inside scores above 0 and takes the whole step at ‖g_0‖
    updates = [BufferedUpdate(device=0, job=0, n_samples=1, base_version=T, epochs=1, flat=torch.tensor([0.0, 3.0, 0])),
               BufferedUpdate(device=1, job=1, n_samples=1, base_version=T, epochs=1, flat=torch.tensor([1e-3, 4.0, 0]))]
    result = aggregate(config("algorithm.name=fedbuff", "algorithm.defense.name=fltrust",
                              "algorithm.defense.server_samples=1", k=2).algorithm, T, w_t, updates,
                       {T: w_t}.__getitem__, None, memory=memory_with(cfg, GivenUpdate(torch.tensor([2.0, 0.0, 0.0]))))
    assert result.info[0]["trust"] == 0.0 and result.info[1]["trust"] > 0.0
    assert float(result.new_global.norm()) == pytest.approx(2.0)


def test_fltrust_without_a_server_held_set_says_so():
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=fltrust", "algorithm.defense.server_samples=1",
                 k=1)
    u = BufferedUpdate(device=0, job=0, n_samples=1, base_version=T, epochs=1, flat=torch.ones(2))
    with pytest.raises(ValueError, match="server-held set"):
        aggregate(cfg.algorithm, T, torch.zeros(2), [u], lambda v: torch.zeros(2), None)


# ---- refusals --------------------------------------------------------------------------------------------------

def test_a_server_held_defense_needs_a_set_and_the_others_refuse_one_at_each_edge():
    fl = ["algorithm.name=fedbuff", "algorithm.defense.name=fltrust"]
    assert "'algorithm.defense.server_samples' has value 0; allowed: at least 1" in \
        refused(*fl, "algorithm.defense.server_samples=0")
    config(*fl, "algorithm.defense.server_samples=1")
    assert "'algorithm.defense.server_samples' has value 1; allowed: 0 unless" in \
        refused("algorithm.name=fedbuff", "algorithm.defense.name=median", "algorithm.defense.server_samples=1")
    assert "0 unless" in refused("algorithm.defense.server_samples=1")  # no defense: no set either
    config("algorithm.name=fedbuff", "algorithm.defense.name=median", "algorithm.defense.server_samples=0")
    assert "'algorithm.defense.server_samples' has value -1" in refused(*fl, "algorithm.defense.server_samples=-1")


def test_fltrust_is_an_estimator_refused_with_a_model_averaging_rule_and_under_dp():
    assert "'algorithm.defense.name' has value 'fltrust'; allowed: a filter" in \
        refused("algorithm.name=seafl", "algorithm.defense.name=fltrust", "algorithm.defense.server_samples=5")
    assert "privacy.enabled=true" in refused("algorithm.name=fedbuff", "algorithm.defense.name=fltrust",
                                             "algorithm.defense.server_samples=5", "privacy.enabled=true",
                                             "privacy.noise_multiplier=1")


# ---- the server-held set -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1, 7, 99])
def test_the_server_set_has_the_stated_size_is_stratified_and_disjoint_from_the_devices_part(count):
    labels = np.repeat(np.arange(4), [40, 30, 20, 10])
    rest, held = server_rows(labels, 100, count, seed=3)
    assert len(held) == count and len(rest) == 100 - count
    assert np.array_equal(np.sort(np.concatenate([rest, held])), np.arange(100))  # a split: disjoint, whole
    share = np.bincount(labels[held], minlength=4)
    for c, g in enumerate([40, 30, 20, 10]):  # a label of g rows gets ⌊g·count/n⌋ or ⌈g·count/n⌉
        assert math.floor(g * count / 100) <= share[c] <= math.ceil(g * count / 100)
    again, held2 = server_rows(labels, 100, count, seed=3)
    assert np.array_equal(held, held2) and np.array_equal(rest, again)
    assert not np.array_equal(server_rows(labels, 100, 50, seed=3)[1], server_rows(labels, 100, 50, seed=4)[1])


def test_the_server_set_leaves_the_devices_a_row_or_is_refused_in_one_line():
    labels = np.zeros(10, dtype=np.int64)
    assert len(server_rows(labels, 10, 9, seed=0)[0]) == 1
    with pytest.raises(ConfigError, match=r"'algorithm.defense.server_samples' has value 10; allowed: fewer than the "
                                          r"10 training samples"):
        server_rows(labels, 10, 10, seed=0)


def test_the_server_set_is_taken_from_an_array_dataset():
    x = torch.arange(20, dtype=torch.uint8).reshape(20, 1, 1, 1)
    data = ArrayDataset(x, torch.arange(20) % 2, num_classes=2, name="t", mean=(0.5,), std=(0.5,))
    rest, held = server_set(data, 4, seed=0)
    assert len(held) == 4 and len(rest) == 16
    assert set(held.images.flatten().tolist()).isdisjoint(rest.images.flatten().tolist())
    assert sorted(held.labels.tolist()) == [0, 0, 1, 1]


# ---- Zeno++ ------------------------------------------------------------------------------------------------------
# Oracle (Xie, Koyejo and Gupta, ICML 2020, Algorithm 1): the candidate gradient g (the server steps x − γ g) is
# rescaled to ‖v‖, ĝ = (‖v‖/‖g‖) g, scored γ⟨v, ĝ⟩ − ρ‖ĝ‖² and accepted iff the score ≥ −γε. An update here is a
# move Δ = w_k − w_{t_k}, the step −γ g of the paper: g = −Δ up to its scale, which the rescaling removes.

class GivenGradient:
    """A server whose gradient at (version, w_t) is a given vector, recording the versions it was asked at."""

    def __init__(self, v):
        self.v, self.asked = v, []

    def gradient(self, version, global_flat):
        self.asked.append(version)
        return self.v.clone()


def oracle_zeno(deltas, v, idx, gamma, rho, eps):
    """Positions Zeno++ accepts."""
    def dot(a, b):
        return sum(a[i] * b[i] for i in idx)
    v_norm, kept = math.sqrt(dot(v, v)), set()
    for k, x in enumerate(deltas):
        r = math.sqrt(dot(x, x))
        g = [0.0] * len(x) if r == 0 else [-(v_norm / r) * e for e in x]
        if gamma * dot(v, g) - rho * dot(g, g) >= -gamma * eps:
            kept.add(k)
    return kept


@SETTINGS
@given(buffers(counters=True), st.sampled_from([0.0, 0.001, 0.05]), st.sampled_from([0.0, 0.1, 2.0]),
       st.sampled_from(["fedbuff", "seafl", "fedavg"]))
def test_zeno_drops_what_the_paper_drops_and_the_rule_weights_the_rest(buf, rho, eps, rule):
    w_t, bases, updates, parts, v = buf
    n = len(updates)
    shape = [f"algorithm.name={rule}", "algorithm.defense.name=zenopp", "algorithm.defense.server_samples=5",
             "algorithm.defense.gamma=0.1", f"algorithm.defense.rho={rho}", f"algorithm.defense.epsilon={eps}"]
    cfg = config(*shape, k=n, m=n)
    server = GivenGradient(v)
    result = aggregate(cfg.algorithm, T, w_t, updates, bases.__getitem__, parts, memory=memory_with(cfg, server))
    deltas = [[a - b for a, b in zip(u.flat.tolist(), bases[u.base_version].tolist())] for u in updates]
    kept = oracle_zeno(deltas, v.tolist(), [i for i in range(w_t.numel()) if bool(parts.params[i])], 0.1, rho, eps)
    assert {i for i, d in enumerate(result.info) if not d["rejected"]} == kept and server.asked == [T]
    assert all(d["reason"].startswith("zenopp: score ") for d in result.info if d["rejected"])
    plain = config(f"algorithm.name={rule}", k=n, m=n)
    alone = aggregate(plain.algorithm, T, w_t, [updates[i] for i in sorted(kept)], bases.__getitem__, parts)
    if kept:
        assert torch.equal(result.new_global, alone.new_global)


def test_zenos_acceptance_edge_is_minus_gamma_epsilon_inclusive():
    """v = (1, 0); Δ = (−1, 0) is the descent direction: ĝ = v, score γ‖v‖² − ρ‖v‖² = 0.1 − ρ. At ρ = 0.1 + γε the
    score is −γε exactly (accepted); just above, refused. Numbers chosen exact in binary: γ = 0.5, ε = 0.25."""
    w_t = torch.zeros(2)
    u = BufferedUpdate(device=0, job=0, n_samples=1, base_version=T, epochs=1, flat=torch.tensor([-3.0, 0.0]))

    def kept(rho):
        cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=zenopp", "algorithm.defense.server_samples=1",
                     "algorithm.defense.gamma=0.5", f"algorithm.defense.rho={rho}", "algorithm.defense.epsilon=0.25",
                     k=1)
        result = aggregate(cfg.algorithm, T, w_t, [u], {T: w_t}.__getitem__, None,
                           memory=memory_with(cfg, GivenGradient(torch.tensor([1.0, 0.0]))))
        return not result.info[0]["rejected"]
    assert kept(0.625) and not kept(0.625 + 2 ** -20)  # 0.5 − 0.625 = −0.125 = −γε


def test_zeno_refreshes_v_when_it_is_refresh_versions_old_and_keeps_it_as_its_state():
    cfg = config("algorithm.name=fedasync", "algorithm.defense.name=zenopp", "algorithm.defense.server_samples=1",
                 "algorithm.defense.refresh=3", k=1)
    server = GivenGradient(torch.tensor([1.0, 0.0]))
    memory = memory_with(cfg, server)
    w = torch.zeros(2)
    for t in range(7):
        u = BufferedUpdate(device=0, job=t, n_samples=1, base_version=t, epochs=1, flat=w + torch.tensor([-1.0, 0]))
        w = aggregate(cfg.algorithm, t, w, [u], lambda v, w=w: w, None, memory=memory).new_global
    assert server.asked == [0, 3, 6]  # fresh at t = 0, 3 and 6; the cached v (2 versions old at most) between
    assert memory.defense_state["version"] == 6 and torch.equal(memory.defense_state["v"], torch.tensor([1.0, 0.0]))
    assert not memory.stateful  # fedasync's memory is the defense's, not the rule's


def test_zeno_without_a_server_held_set_says_so_and_its_keys_are_refused_out_of_domain():
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=zenopp", "algorithm.defense.server_samples=1", k=1)
    u = BufferedUpdate(device=0, job=0, n_samples=1, base_version=T, epochs=1, flat=torch.ones(2))
    with pytest.raises(ValueError, match="zenopp needs the server-held set"):
        aggregate(cfg.algorithm, T, torch.zeros(2), [u], lambda v: torch.zeros(2), None)
    zen = ["algorithm.name=fedbuff", "algorithm.defense.name=zenopp", "algorithm.defense.server_samples=1"]
    assert "at least 1 with algorithm.defense.name=zenopp" in refused("algorithm.name=fedbuff",
                                                                      "algorithm.defense.name=zenopp")
    for bad in ("rho=-0.001", "epsilon=-0.1", "refresh=0", "gamma=0"):
        assert f"'algorithm.defense.{bad.split('=')[0]}'" in refused(*zen, f"algorithm.defense.{bad}")
    config(*zen, "algorithm.defense.rho=0", "algorithm.defense.epsilon=0", "algorithm.defense.refresh=1")
