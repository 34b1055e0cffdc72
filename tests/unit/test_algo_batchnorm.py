"""The rules on batch-norm layouts (SPEC "Aggregation rules"): integer counters are carried, never
averaged nor part of a cosine; Eq. 5's cosine runs over the trainable parameters by default.

Why: on ResNet-18 the 20 ``num_batches_tracked`` counters (hundreds, growing every version) outweigh
11 M weights that move by ~1e-3, so with them in the cosine two updates with *opposite* weight
deltas both scored cos ≈ 0.96-0.9999 and SEAFL's importance factor was the same for every update.
"""
import pytest
import torch

from seafl_dist.algo import BufferedUpdate, FlatParts, aggregate
from seafl_dist.algo.seafl import seafl_cosine
from seafl_dist.settings import AlgorithmConfig
from seafl_dist.models import build_model
from seafl_dist.train import FlatLayout, flatten


def layout_parts(width):
    torch.manual_seed(0)
    model = build_model("resnet18", 10, 3, width=width, image_size=32)
    layout = FlatLayout.of(model)
    parts = FlatParts(params=layout.mask("param"), stats=layout.mask("stat"), counters=layout.mask("counter"))
    return flatten(model), parts


@pytest.fixture(scope="module")
def resnet18():
    """The full-width ResNet-18 layout (11,173,962 parameters, 9,600 statistics, 20 counters)."""
    return layout_parts(1.0)


def test_resnet18_layout_has_counters_stats_and_params(resnet18):
    w, parts = resnet18
    assert (int(parts.params.sum()), int(parts.stats.sum()), int(parts.counters.sum())) == (11173962, 9600, 20)
    assert not bool((parts.params & parts.stats).any() or (parts.params & parts.counters).any())
    assert bool((parts.params | parts.stats | parts.counters).all())


def scenario(w0, parts, version_steps=50 * 19, steps=19):
    """w_{t_k} at version 50 (counters 950); w_t moved by Δ (the global went the way of update 1);
    update 1 = w_{t_k} + Δ, update 2 = w_{t_k} − Δ, both trained 19 steps (counters + 19)."""
    g = torch.Generator().manual_seed(1)
    delta = torch.randn(w0.numel(), generator=g) * 1e-3 * (parts.params | parts.stats)
    base = w0.clone()
    base[parts.counters] = float(version_steps)
    plus, minus, moved = base + delta, base - delta, base + delta
    for w in (plus, minus, moved):
        w[parts.counters] += steps
    ups = [BufferedUpdate(0, 0, plus, 600, 50, 5), BufferedUpdate(1, 1, minus, 600, 50, 5)]
    return base, moved, ups


def test_opposite_deltas_on_resnet18_give_opposite_cosines(resnet18):
    w0, parts = resnet18
    base, moved, ups = scenario(w0, parts)
    cfg = AlgorithmConfig(name="seafl", similarity="delta_vs_movement")
    res = aggregate(cfg, 51, moved, ups, {50: base}.__getitem__, parts)
    cos = [i["cos"] for i in res.info]
    assert cos[0] == pytest.approx(1.0, abs=1e-6) and cos[1] == pytest.approx(-1.0, abs=1e-6)
    assert [i["s"] for i in res.info] == pytest.approx([1.0, 0.0], abs=1e-6)
    # counters: carried as the largest whole count, 50 versions x 19 steps + 19
    assert torch.equal(res.new_global[parts.counters], torch.full((20,), 50.0 * 19 + 19))
    # Eq. 5 as written (x = Δ_k, y = w_t): opposite deltas, opposite cosines
    mask = parts.similarity_mask("parameters")
    c0, c1 = (seafl_cosine("delta_vs_global", u.flat, moved, lambda: base, mask) for u in ups)
    assert c0 == pytest.approx(-c1, rel=1e-3) and abs(c0) > 1e-6
    # the counters in the cosine (the old behaviour) make the two updates look alike
    assert all(seafl_cosine("delta_vs_movement", u.flat, moved, lambda: base) > 0.9 for u in ups)


@pytest.fixture(scope="module")
def small():
    return layout_parts(0.125)


@pytest.mark.parametrize("name", ["fedavg", "fedbuff", "fedasync", "seafl"])
def test_every_rule_carries_counters_as_the_max_and_averages_the_rest(small, name):
    """w_t's counters are 100; fresh updates trained 7 and 3 steps (107, 103), a stale one 9 steps from
    a base at 80 (89), a rejected one claims 500. Every rule: counters = max(100, 107, 103, 89) = 107."""
    w0, parts = small
    cnt = parts.counters
    g = torch.Generator().manual_seed(2)
    wt = w0.clone()
    wt[cnt] = 100.0
    old = w0.clone()
    old[cnt] = 80.0

    def local(base, steps):
        w = base + torch.randn(w0.numel(), generator=g) * 0.01 * (parts.params | parts.stats)
        w[cnt] = base[cnt] + steps
        return w
    bad = local(wt, 400)
    bad[0] = float("nan")
    ups = [BufferedUpdate(0, 0, local(wt, 7), 30, 5, 1), BufferedUpdate(1, 1, local(wt, 3), 10, 5, 1),
           BufferedUpdate(2, 2, local(old, 9), 20, 3, 1), BufferedUpdate(3, 3, bad, 20, 5, 1)]
    cfg = AlgorithmConfig(name=name, staleness_limit=None if name == "fedasync" else 10)
    res = aggregate(cfg, 5, wt, ups, {5: wt, 3: old}.__getitem__, parts)
    assert [i["rejected"] for i in res.info] == [False, False, False, True]
    assert torch.equal(res.new_global[cnt], torch.full((int(cnt.sum()),), 107.0))
    floats = parts.params | parts.stats
    if name == "fedavg":  # params and running statistics: the sample-weighted average, as floats
        expected = (30 * ups[0].flat + 10 * ups[1].flat + 20 * ups[2].flat) / 60
        torch.testing.assert_close(res.new_global[floats], expected[floats])
    if name == "fedbuff":  # w_t + mean Δ over params and stats
        mean_delta = ((ups[0].flat - wt) + (ups[1].flat - wt) + (ups[2].flat - old)) / 3
        torch.testing.assert_close(res.new_global[floats], (wt + mean_delta)[floats])


def test_similarity_over_parameters_and_stats(small):
    """An update that moved only running statistics: orthogonal to w_t over the parameters
    (its Δ there is zero: cos 0, s = μ/2), not over parameters and statistics."""
    w0, parts = small
    wt = w0.clone()
    wt[parts.stats] += 1.0
    w_k = wt.clone()
    w_k[parts.stats] += 0.5
    ups = [BufferedUpdate(0, 0, w_k, 10, 0, 1)]
    by = {over: aggregate(AlgorithmConfig(name="seafl", similarity_over=over), 0, wt, ups, {0: wt}.__getitem__,
                          parts).info[0]["cos"] for over in ("parameters", "parameters_and_stats")}
    assert by["parameters"] == 0.0 and by["parameters_and_stats"] > 0.1


def test_a_layout_of_another_size_is_refused(small):
    w0, parts = small
    with pytest.raises(ValueError, match="flat layout"):
        aggregate(AlgorithmConfig(name="fedavg"), 0, w0[:-1].clone(), [], lambda v: w0, parts)
