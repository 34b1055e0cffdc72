"""FedAvg, FedBuff and FedAsync worked by hand on tiny vectors."""
import math

import numpy as np
import pytest
import torch

from seafl_dist.algo import BufferedUpdate, aggregate, staleness_factor_fedasync
from seafl_dist.settings import AlgorithmConfig

T = torch.tensor


def no_base(v):
    raise AssertionError(f"this rule must not ask for base_model({v})")


def close(res, expected):
    np.testing.assert_allclose(res.new_global.numpy(), expected, rtol=1e-6, atol=1e-7)


def weights(res):
    return [i["weight"] for i in res.info]


# ---- FedAvg ------------------------------------------------------------------------------

def test_fedavg_sample_weighted_average():
    # n = [1, 3]: w = 1/4·[4, 0, 8] + 3/4·[0, 4, 0] = [1, 3, 2]; w_t plays no part.
    ups = [BufferedUpdate(0, 0, T([4.0, 0.0, 8.0]), 1, 0, 5), BufferedUpdate(1, 1, T([0.0, 4.0, 0.0]), 3, 0, 5)]
    res = aggregate(AlgorithmConfig(name="fedavg"), 0, T([100.0, 100.0, 100.0]), ups, no_base)
    close(res, [1.0, 3.0, 2.0])
    assert weights(res) == pytest.approx([0.25, 0.75])
    assert [i["staleness"] for i in res.info] == [0, 0]


def test_fedavg_zero_samples_keeps_global():
    g = T([1.0, 2.0])
    res = aggregate(AlgorithmConfig(name="fedavg"), 0, g, [BufferedUpdate(0, 0, T([5.0, 5.0]), 0, 0, 5)], no_base)
    assert torch.equal(res.new_global, g) and weights(res) == [0.0]


# ---- FedBuff -----------------------------------------------------------------------------
# t = 5, w_5 = [1, 1], w_2 = [0, 0].
#   u0: t_k = 5 (S = 0), w = [3, 1] -> Δ = [2, 0]
#   u1: t_k = 2 (S = 3), w = [0, 4] -> Δ = [0, 4]
FB_VERSIONS = {2: T([0.0, 0.0]), 5: T([1.0, 1.0])}


def fedbuff_buffer():
    return [BufferedUpdate(0, 0, T([3.0, 1.0]), 50, 5, 5), BufferedUpdate(1, 1, T([0.0, 4.0]), 70, 2, 5)]


def test_fedbuff_plain_mean_delta():
    # η_g = 1: w = [1,1] + 1/2·([2,0] + [0,4]) = [2, 3]
    res = aggregate(AlgorithmConfig(name="fedbuff"), 5, FB_VERSIONS[5], fedbuff_buffer(), FB_VERSIONS.__getitem__)
    close(res, [2.0, 3.0])
    assert weights(res) == pytest.approx([0.5, 0.5])


def test_fedbuff_server_lr():
    # η_g = 0.5: w = [1,1] + 0.5·1/2·([2,0] + [0,4]) = [1.5, 2]; weight = η_g/|B| = 0.25
    cfg = AlgorithmConfig(name="fedbuff", server_lr=0.5)
    res = aggregate(cfg, 5, FB_VERSIONS[5], fedbuff_buffer(), FB_VERSIONS.__getitem__)
    close(res, [1.5, 2.0])
    assert weights(res) == pytest.approx([0.25, 0.25])


def test_fedbuff_sqrt_staleness_scaling():
    # c = [1/√1, 1/√4] = [1, 0.5]; η_g = 0.5:
    # w = [1,1] + 0.5/2·(1·[2,0] + 0.5·[0,4]) = [1,1] + 0.25·[2,2] = [1.5, 1.5]; weights [0.25, 0.125]
    cfg = AlgorithmConfig(name="fedbuff", server_lr=0.5, staleness_scaling="sqrt")
    res = aggregate(cfg, 5, FB_VERSIONS[5], fedbuff_buffer(), FB_VERSIONS.__getitem__)
    close(res, [1.5, 1.5])
    assert weights(res) == pytest.approx([0.25, 0.125])


# ---- FedAsync ----------------------------------------------------------------------------

def fa_cfg(fn, **kw):
    return AlgorithmConfig(name="fedasync", staleness_fn=fn, **kw)


@pytest.mark.parametrize("fn, S, f", [
    ("constant", 0, 1.0), ("constant", 9, 1.0),
    ("polynomial", 0, 1.0), ("polynomial", 3, 0.5),  # (1+3)^-0.5 = 1/2
    ("polynomial", 8, 1 / 3),  # (1+8)^-0.5 = 1/3
    ("hinge", 0, 1.0), ("hinge", 4, 1.0),  # S ≤ b = 4
    ("hinge", 5, 1 / 11),  # 1/(10·(5-4)+1)
    ("hinge", 6, 1 / 21),  # 1/(10·(6-4)+1)
])
def test_fedasync_staleness_functions(fn, S, f):
    assert staleness_factor_fedasync(S, fa_cfg(fn)) == pytest.approx(f)


def test_fedasync_staleness_function_parameters():
    assert staleness_factor_fedasync(3, fa_cfg("polynomial", poly_a=1.0)) == pytest.approx(0.25)  # 4^-1
    assert staleness_factor_fedasync(3, fa_cfg("hinge", hinge_a=2.0, hinge_b=1.0)) == pytest.approx(0.2)  # 1/(2·2+1)


@pytest.mark.parametrize("fn, a", [("constant", 0.6), ("polynomial", 0.3), ("hinge", 0.6)])
def test_fedasync_mixing_by_hand(fn, a):
    # t = 3, t_k = 0 -> S = 3. α_mix = 0.6: a = 0.6·f(3) = 0.6 (constant), 0.3 (polynomial), 0.6 (hinge, 3 ≤ 4).
    # w = (1-a)·[1, 2] + a·[3, -2]; for a = 0.3: [0.7+0.9, 1.4-0.6] = [1.6, 0.8]
    g = T([1.0, 2.0])
    res = aggregate(fa_cfg(fn), 3, g, [BufferedUpdate(0, 0, T([3.0, -2.0]), 10, 0, 5)], no_base)
    close(res, [(1 - a) * 1 + a * 3, (1 - a) * 2 - a * 2])
    assert weights(res) == pytest.approx([a]) and res.info[0]["a"] == pytest.approx(a)


def test_fedasync_hinge_beyond_threshold():
    # S = 6 > 4: a = 0.6/21; w = (1-a)·[0] + a·[21] = [0.6]
    res = aggregate(fa_cfg("hinge"), 6, T([0.0]), [BufferedUpdate(0, 0, T([21.0]), 1, 0, 5)], no_base)
    close(res, [0.6])


def test_fedasync_several_updates_applied_in_order():
    # constant f, α_mix = 0.5: a = 0.5 each. w_t = [0]; u0 = [4], u1 = [8].
    # after u0: 0.5·0 + 0.5·4 = 2; after u1: 0.5·2 + 0.5·8 = 5.
    # effective coefficients: u0 0.5·(1-0.5) = 0.25, u1 0.5 (w_t keeps 0.25).
    cfg = fa_cfg("constant", mixing=0.5)
    ups = [BufferedUpdate(0, 0, T([4.0]), 1, 2, 5), BufferedUpdate(1, 1, T([8.0]), 1, 2, 5)]
    res = aggregate(cfg, 2, T([0.0]), ups, no_base)
    close(res, [5.0])
    assert weights(res) == pytest.approx([0.25, 0.5])
    assert [i["a"] for i in res.info] == pytest.approx([0.5, 0.5])


def test_fedasync_mixing_one_replaces_global():
    cfg = fa_cfg("constant", mixing=1.0)
    res = aggregate(cfg, 0, T([1.0, 1.0]), [BufferedUpdate(0, 0, T([7.0, -7.0]), 1, 0, 5)], no_base)
    close(res, [7.0, -7.0])
    assert math.isclose(weights(res)[0], 1.0)
