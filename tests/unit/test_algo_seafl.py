"""SEAFL (paper Eq. 4-8) worked by hand on tiny vectors, plus Lemma 1 as a property."""
import math

import numpy as np
import pytest
import torch

from seafl_dist.algo import BufferedUpdate, aggregate, seafl_gamma
from seafl_dist.algo.seafl import seafl_raw_weights
from seafl_dist.settings import AlgorithmConfig

T = torch.tensor

# Shared buffer at version t = 4, global w_4 = [1, 0]; older globals w_0 = [0, 0], w_2 = [1, 1].
#   u0: t_k = 4 (S = 0), n = 100, w = [2, 0]   -> Δ = w - w_4 = [1, 0]
#   u1: t_k = 2 (S = 2), n = 200, w = [1, 4]   -> Δ = w - w_2 = [0, 3]
#   u2: t_k = 0 (S = 4), n = 100, w = [-1, 0]  -> Δ = w - w_0 = [-1, 0]
# d = n / Σn = [1/4, 1/2, 1/4].  Defaults: α = 3, μ = 1, β = 10, ϑ = 0.8.
# γ (Eq. 4) = 3·10/(S+10) = [30/10, 30/12, 30/14] = [3, 2.5, 15/7].
VERSIONS = {0: T([0.0, 0.0]), 2: T([1.0, 1.0]), 4: T([1.0, 0.0])}
GLOBAL = VERSIONS[4]


def buffer():
    return [BufferedUpdate(0, 10, T([2.0, 0.0]), 100, 4, 5),
            BufferedUpdate(1, 11, T([1.0, 4.0]), 200, 2, 5),
            BufferedUpdate(2, 12, T([-1.0, 0.0]), 100, 0, 3)]


def run(**kw):
    cfg = AlgorithmConfig(name=kw.pop("name", "seafl"), **kw)
    return aggregate(cfg, 4, GLOBAL, buffer(), VERSIONS.__getitem__)


def mix(w_new, theta=0.8):  # Eq. 8
    return (1 - theta) * np.array([1.0, 0.0]) + theta * np.asarray(w_new)


def check(res, weights, gammas, ss, coss, new_global):
    assert [i["weight"] for i in res.info] == pytest.approx(weights, abs=1e-12)
    assert [i["gamma"] for i in res.info] == pytest.approx(gammas, abs=1e-12)
    assert [i["s"] for i in res.info] == pytest.approx(ss, abs=1e-12)
    assert [i["cos"] for i in res.info] == pytest.approx(coss, abs=1e-12)
    assert [i["staleness"] for i in res.info] == [0, 2, 4]
    assert not any(i["rejected"] for i in res.info)
    assert res.new_global.dtype == torch.float32
    np.testing.assert_allclose(res.new_global.numpy(), new_global, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["seafl", "seafl2"])
def test_delta_vs_global_by_hand(name):
    # x = Δ, y = w_4 = [1, 0]: cos = [1, 0, -1] -> s = μ(cos+1)/2 = [1, 0.5, 0].
    # p_raw = d(γ+s) = [1/4·4, 1/2·3, 1/4·15/7] = [1, 1.5, 15/28]; Σ = 85/28.
    # p = [28/85, 42/85, 15/85].
    # w_new = (28·[2,0] + 42·[1,4] + 15·[-1,0]) / 85 = [83/85, 168/85].
    check(run(name=name), [28 / 85, 42 / 85, 15 / 85], [3, 2.5, 15 / 7], [1, 0.5, 0], [1, 0, -1],
          mix([83 / 85, 168 / 85]))
    # w_{t+1} = 0.2·[1,0] + 0.8·[83/85, 168/85] = [83.4/85, 134.4/85]
    np.testing.assert_allclose(run(name=name).new_global.numpy(), [83.4 / 85, 134.4 / 85], rtol=1e-6)


def test_model_vs_global_by_hand():
    # x = w_k, y = [1, 0]: cos = [1, 1/√17, -1] (|[1,4]| = √17).
    # s = [1, (1 + 1/√17)/2, 0]; p_raw = [1, 1/2·(2.5 + s1), 15/28].
    r = 1 / math.sqrt(17)
    s1 = (1 + r) / 2
    raw = [1.0, 0.5 * (2.5 + s1), 15 / 28]
    p = [x / sum(raw) for x in raw]
    w_new = p[0] * np.array([2, 0]) + p[1] * np.array([1, 4]) + p[2] * np.array([-1, 0])
    check(run(similarity="model_vs_global"), p, [3, 2.5, 15 / 7], [1, s1, 0], [1, r, -1], mix(w_new))


def test_delta_vs_movement_by_hand():
    # y = w_4 - w_{t_k}: u0 [0,0] (zero vector -> cos := 0), u1 [0,-1], u2 [1,0].
    # cos(Δ, y) = [0, cos([0,3],[0,-1]) = -1, cos([-1,0],[1,0]) = -1] -> s = [0.5, 0, 0].
    # p_raw = [1/4·3.5, 1/2·2.5, 1/4·15/7] = [0.875, 1.25, 15/28]; ·28 -> [24.5, 35, 15], Σ 74.5.
    # p = [49/149, 70/149, 30/149]; w_new = (49·[2,0] + 70·[1,4] + 30·[-1,0]) / 149 = [138/149, 280/149].
    check(run(similarity="delta_vs_movement"), [49 / 149, 70 / 149, 30 / 149], [3, 2.5, 15 / 7],
          [0.5, 0, 0], [0, -1, -1], mix([138 / 149, 280 / 149]))


def test_beta_infinite_by_hand():
    # β = ∞: γ = α = 3 for all. s = [1, 0.5, 0] (delta_vs_global).
    # p_raw = [1/4·4, 1/2·3.5, 1/4·3] = [1, 1.75, 0.75]; Σ 3.5 -> p = [2/7, 1/2, 3/14].
    # w_new = 2/7·[2,0] + 1/2·[1,4] + 3/14·[-1,0] = [(8 + 7 - 3)/14, 2] = [6/7, 2].
    check(run(staleness_limit=None), [2 / 7, 1 / 2, 3 / 14], [3, 3, 3], [1, 0.5, 0], [1, 0, -1],
          mix([6 / 7, 2]))


def test_theta_and_mu_and_alpha_knobs():
    # μ = 0: s = 0, p_raw = d·γ = [3/4, 5/4, 15/28]; ·28 -> [21, 35, 15], Σ 71.
    # ϑ = 1: w_{t+1} = w_new = (21·[2,0] + 35·[1,4] + 15·[-1,0]) / 71 = [62/71, 140/71].
    res = run(mu=0.0, theta=1.0)
    assert [i["weight"] for i in res.info] == pytest.approx([21 / 71, 35 / 71, 15 / 71])
    np.testing.assert_allclose(res.new_global.numpy(), [62 / 71, 140 / 71], rtol=1e-6)
    # α = 0, μ = 2: γ = 0, s = [2, 1, 0]; p_raw = [1/2, 1/2, 0] -> p = [1/2, 1/2, 0].
    res = run(alpha=0.0, mu=2.0, theta=0.5)
    assert [i["weight"] for i in res.info] == pytest.approx([0.5, 0.5, 0.0])
    # w_new = [1.5, 2]; w_{t+1} = 0.5·[1,0] + 0.5·[1.5, 2] = [1.25, 1]
    np.testing.assert_allclose(res.new_global.numpy(), [1.25, 1.0], rtol=1e-6)


def test_all_zero_weights_fall_back_to_global():
    # α = 0 and the only update points exactly away from w_t: cos = -1, s = 0, p = 0.
    cfg = AlgorithmConfig(name="seafl", alpha=0.0, mu=1.0, similarity="model_vs_global")
    res = aggregate(cfg, 4, GLOBAL, [BufferedUpdate(0, 0, T([-3.0, 0.0]), 10, 4, 5)], VERSIONS.__getitem__)
    assert torch.equal(res.new_global, GLOBAL) and res.new_global is not GLOBAL
    assert res.info[0]["weight"] == 0.0 and res.info[0]["cos"] == -1.0 and not res.info[0]["rejected"]


def test_gamma_edge_cases():
    assert seafl_gamma(0, 3.0, 10) == 3.0
    assert seafl_gamma(10, 3.0, 10) == 1.5  # S = β: exactly α/2 (Lemma 1's lower end)
    assert seafl_gamma(7, 3.0, None) == 3.0  # β = ∞
    assert seafl_gamma(0, 3.0, 0) == 3.0  # β = 0, S = 0: defined as α
    assert seafl_gamma(2, 3.0, 0) == 0.0
    with pytest.raises(ValueError):
        seafl_gamma(-1, 3.0, 10)


def test_beta_zero_synchronous():
    # β = 0 (all S = 0, FedAvg-like): γ = α; with μ = 0 SEAFL weights are n_k/Σn.
    cfg = AlgorithmConfig(name="seafl", staleness_limit=0, mu=0.0, theta=1.0)
    ups = [BufferedUpdate(0, 0, T([4.0, 0.0]), 1, 4, 5), BufferedUpdate(1, 1, T([0.0, 4.0]), 3, 4, 5)]
    res = aggregate(cfg, 4, GLOBAL, ups, VERSIONS.__getitem__)
    assert [i["weight"] for i in res.info] == pytest.approx([0.25, 0.75])
    np.testing.assert_allclose(res.new_global.numpy(), [1.0, 3.0], rtol=1e-6)


def test_lemma1_raw_weights_property():
    """p_k (before normalisation) ∈ [α/2·d_k, (α+μ)·d_k] for finite β and S_k ≤ β."""
    rng = np.random.default_rng(20240601)
    for _ in range(3000):
        k = int(rng.integers(1, 13))
        beta = int(rng.integers(0, 21))
        alpha, mu = float(rng.uniform(0, 5)), float(rng.uniform(0, 5))
        n = rng.integers(1, 1000, size=k).tolist()
        stale = rng.integers(0, beta + 1, size=k).tolist()
        cos = rng.uniform(-1, 1, size=k)
        cos[rng.random(k) < 0.2] = rng.choice([-1.0, 1.0])  # hit the ends too
        raw = seafl_raw_weights(n, stale, cos.tolist(), alpha, beta, mu)
        d = np.array(n) / sum(n)
        p = np.array([r[2] for r in raw])
        assert np.all(p >= alpha / 2 * d - 1e-12), (alpha, beta, stale, p, d)
        assert np.all(p <= (alpha + mu) * d + 1e-12), (alpha, mu, p, d)


def test_lemma1_through_aggregate_random_vectors():
    """Same bound on γ + s reported by the full rule, for every similarity mode."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        beta = int(rng.integers(1, 8))
        version = beta + int(rng.integers(0, 4))
        dim = int(rng.integers(2, 6))
        hist = {v: torch.from_numpy(rng.normal(size=dim).astype(np.float32)) for v in range(version + 1)}
        k = int(rng.integers(1, 6))
        ups = [BufferedUpdate(j, j, torch.from_numpy(rng.normal(size=dim).astype(np.float32)),
                              int(rng.integers(1, 100)), version - int(rng.integers(0, beta + 1)), 5)
               for j in range(k)]
        mode = ["delta_vs_global", "model_vs_global", "delta_vs_movement"][trial % 3]
        cfg = AlgorithmConfig(name="seafl", staleness_limit=beta, alpha=float(rng.uniform(0.1, 4)),
                              mu=float(rng.uniform(0, 4)), similarity=mode)
        res = aggregate(cfg, version, hist[version], ups, hist.__getitem__)
        assert sum(i["weight"] for i in res.info) == pytest.approx(1.0)
        for i in res.info:
            assert cfg.alpha / 2 - 1e-12 <= i["gamma"] + i["s"] <= cfg.alpha + cfg.mu + 1e-12
            assert -1.0 <= i["cos"] <= 1.0
        assert torch.isfinite(res.new_global).all()
