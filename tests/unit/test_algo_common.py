"""Screening (rejection), cosine, non-mutation and the layer's import hygiene."""
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import seafl_dist.algo as algo
from seafl_dist.algo import AggregationResult, BufferedUpdate, aggregate, check_update, cosine
from seafl_dist.settings import AlgorithmConfig

T = torch.tensor
VERSIONS = {0: T([0.0, 0.0]), 1: T([0.5, 0.5]), 2: T([1.0, 1.0])}
GLOBAL = VERSIONS[2]
CONFIGS = {
    "fedavg": AlgorithmConfig(name="fedavg"),
    "fedbuff": AlgorithmConfig(name="fedbuff", server_lr=0.7, staleness_scaling="sqrt"),
    "fedasync": AlgorithmConfig(name="fedasync"),
    "seafl": AlgorithmConfig(name="seafl"),
    "seafl_model": AlgorithmConfig(name="seafl", similarity="model_vs_global"),
    "seafl_movement": AlgorithmConfig(name="seafl2", similarity="delta_vs_movement", staleness_limit=None),
}


def good():
    return [BufferedUpdate(0, 0, T([2.0, 0.0]), 30, 2, 5), BufferedUpdate(1, 1, T([0.0, 3.0]), 10, 0, 5)]


def test_check_update():
    assert check_update(T([1.0, 2.0]), 2) is None
    assert check_update(T([1.0, float("nan")]), 2) == "non-finite"
    assert check_update(T([1.0, float("inf")]), 2) == "non-finite"
    assert check_update(T([1.0, float("-inf")]), 2) == "non-finite"
    assert check_update(T([1.0, 2.0, 3.0]), 2) == "wrong size: got 3, expected 2"
    assert check_update(torch.zeros(1, 2), 2) == "wrong size: got (1, 2), expected 2"
    assert check_update(torch.zeros(()), 1) == "wrong size: got (), expected 1"
    assert check_update(T([1, 2]), 2).startswith("wrong dtype")
    assert check_update([1.0, 2.0], 2).startswith("not a tensor")


def test_cosine():
    assert cosine(T([1.0, 0.0]), T([0.0, 2.0])) == 0.0
    assert cosine(T([1.0, 1.0]), T([2.0, 2.0])) == pytest.approx(1.0)
    assert cosine(T([1.0, 1.0]), T([-3.0, -3.0])) == pytest.approx(-1.0)
    assert cosine(T([3.0, 4.0]), T([1.0, 0.0])) == pytest.approx(0.6)
    assert cosine(T([0.0, 0.0]), T([1.0, 2.0])) == 0.0  # zero vector: defined as 0
    assert cosine(T([1.0, 2.0]), T([0.0, 0.0])) == 0.0
    with pytest.raises(ValueError):
        cosine(T([1.0]), T([1.0, 2.0]))


def test_cosine_float64_accuracy_and_chunks():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1 << 20) + 37).astype(np.float32)  # more than one chunk
    y = (x + 1e-3 * rng.normal(size=x.size)).astype(np.float32)
    ref = float(np.dot(x.astype(np.float64), y) / (np.linalg.norm(x.astype(np.float64)) * np.linalg.norm(y.astype(np.float64))))
    assert cosine(torch.from_numpy(x), torch.from_numpy(y)) == pytest.approx(ref, abs=1e-12)
    big = torch.full((4,), 3e38)  # squares overflow float32, not float64
    assert cosine(big, big) == pytest.approx(1.0)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("bad, reason", [
    (T([float("nan"), 1.0]), "non-finite"),
    (T([float("inf"), 1.0]), "non-finite"),
    (T([1.0, 2.0, 3.0]), "wrong size: got 3, expected 2"),
    (torch.ones(2, 1), "wrong size: got (2, 1), expected 2"),
])
def test_bad_update_rejected_others_still_applied(name, bad, reason):
    cfg = CONFIGS[name]
    ups = good()
    ups.insert(1, BufferedUpdate(9, 9, bad, 1000, 1, 5))
    res = aggregate(cfg, 2, GLOBAL, ups, VERSIONS.__getitem__)
    ref = aggregate(cfg, 2, GLOBAL, good(), VERSIONS.__getitem__)  # as if the bad one were absent
    assert torch.equal(res.new_global, ref.new_global)
    assert torch.isfinite(res.new_global).all()
    assert res.info[1]["rejected"] is True and res.info[1]["weight"] == 0.0 and res.info[1]["reason"] == reason
    assert [res.info[0]["weight"], res.info[2]["weight"]] == [ref.info[0]["weight"], ref.info[1]["weight"]]
    assert not res.info[0]["rejected"] and res.info[0]["reason"] is None
    if cfg.rule == "seafl":
        assert res.info[1]["gamma"] is None and res.info[1]["s"] is None and res.info[1]["cos"] is None


@pytest.mark.parametrize("name", list(CONFIGS))
def test_everything_rejected_keeps_global(name):
    ups = [BufferedUpdate(0, 0, T([float("nan"), 0.0]), 5, 2, 5), BufferedUpdate(1, 1, T([1.0]), 5, 2, 5)]
    res = aggregate(CONFIGS[name], 2, GLOBAL, ups, VERSIONS.__getitem__)
    assert isinstance(res, AggregationResult)
    assert torch.equal(res.new_global, GLOBAL) and res.new_global is not GLOBAL
    assert [i["weight"] for i in res.info] == [0.0, 0.0]
    assert [i["reason"] for i in res.info] == ["non-finite", "wrong size: got 1, expected 2"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_empty_buffer_keeps_global(name):
    res = aggregate(CONFIGS[name], 2, GLOBAL, [], VERSIONS.__getitem__)
    assert torch.equal(res.new_global, GLOBAL) and res.new_global is not GLOBAL and res.info == []


@pytest.mark.parametrize("name", list(CONFIGS))
def test_inputs_never_mutated(name):
    rng = np.random.default_rng(3)
    hist = {v: torch.from_numpy(rng.normal(size=5).astype(np.float32)) for v in range(4)}
    ups = [BufferedUpdate(k, k, torch.from_numpy(rng.normal(size=5).astype(np.float32)), 10 + k, k, 5)
           for k in range(4)]
    before = ({v: w.clone() for v, w in hist.items()}, [u.flat.clone() for u in ups])
    res = aggregate(CONFIGS[name], 3, hist[3], ups, hist.__getitem__)
    assert all(torch.equal(hist[v], before[0][v]) for v in hist)
    assert all(torch.equal(u.flat, f) for u, f in zip(ups, before[1]))
    assert all(res.new_global.data_ptr() != t.data_ptr() for t in [*hist.values(), *(u.flat for u in ups)])
    assert res.new_global.dtype == torch.float32 and res.new_global.shape == (5,)


def test_base_model_called_once_per_version():
    calls = []

    def base(v):
        calls.append(v)
        return VERSIONS[v]

    ups = good() + [BufferedUpdate(2, 2, T([1.0, 1.0]), 5, 2, 5)]
    aggregate(CONFIGS["seafl_movement"], 2, GLOBAL, ups, base)
    assert sorted(calls) == [0, 2]


def test_future_base_version_is_a_bug():
    with pytest.raises(ValueError, match="base_version"):
        aggregate(CONFIGS["seafl"], 1, GLOBAL, [BufferedUpdate(0, 0, T([1.0, 1.0]), 5, 2, 5)],
                  VERSIONS.__getitem__)


def test_public_api():
    assert set(algo.__all__) >= {"AggregationResult", "BufferedUpdate", "aggregate", "check_update",
                                 "cosine", "seafl_gamma", "staleness_factor_fedasync"}
    u = BufferedUpdate(device=1, job=2, flat=T([1.0]), n_samples=3, base_version=4, epochs=5)
    with pytest.raises(Exception):
        u.n_samples = 9  # frozen


def test_no_distributed_or_lightning_imports():
    src = Path(algo.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        assert not re.search(r"^\s*(import|from)\s+(torch\.distributed|lightning|pytorch_lightning)", text, re.M), f
    code = ("import sys, seafl_dist.algo; "
            "bad = [m for m in sys.modules if m.startswith(('lightning', 'pytorch_lightning'))]; "
            "assert not bad, bad")
    root = str(Path(algo.__file__).parents[2])
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root,
                   env={**os.environ, "PYTHONPATH": root})


def test_staleness_reported():
    res = aggregate(CONFIGS["fedavg"], 2, GLOBAL, good(), VERSIONS.__getitem__)
    assert [i["staleness"] for i in res.info] == [0, 2]
    assert math.isclose(sum(i["weight"] for i in res.info), 1.0)
