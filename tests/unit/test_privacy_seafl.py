"""SEAFL and SEAFL² under user-level DP (issue 42 B; docs/privacy.md, "SEAFL"): Eq. 7 on the deltas, and each form's
sensitivity S tight on a pair of neighbouring buffers (within 1%) and never exceeded by random ones."""
import math

import pytest
import torch

from seafl_dist.algo.seafl import seafl, seafl_on_deltas
from seafl_dist.algo.types import BufferedUpdate, FlatParts
from seafl_dist.privacy import clip_updates
from seafl_dist.privacy.sensitivity import seafl_sensitivity, seafl_weight_bounds
from seafl_dist.settings import ConfigError, config_from_dict

F64 = torch.float64
N = 3000
PARTS = FlatParts(torch.ones(N, dtype=torch.bool), torch.zeros(N, dtype=torch.bool), torch.zeros(N, dtype=torch.bool))
T, C = 6, 0.4


def alg(*extra):
    return config_from_dict({}, ["algorithm.name=seafl", "algorithm.buffer_size=4", *extra]).algorithm


def vec(seed, scale=1.0):
    return torch.randn(N, generator=torch.Generator().manual_seed(seed)) * scale


def update(device, flat, base, n=10, job=0):
    return BufferedUpdate(device=device, job=job, flat=flat, n_samples=n, base_version=base, epochs=1)


def aggregate(cfg, form, ups, bases):
    clipped, _ = clip_updates(ups, bases.__getitem__, PARTS, C)
    result = seafl(cfg, T, bases[T], clipped, bases.__getitem__, PARTS)
    if form == "delta":
        result = seafl_on_deltas(cfg, bases[T], clipped, result, bases.__getitem__, PARTS)
    return result


def distance(bases, ups):
    return lambda i, j: float((bases[ups[i].base_version].to(F64) - bases[ups[j].base_version].to(F64)).norm())


@pytest.mark.parametrize("form, gap", [("delta", 0.0), ("delta", 5.0), ("model", 0.0), ("model", 0.3),
                                       ("model", 5.0)])
def test_neighbouring_buffers_move_the_aggregate_by_s_within_one_percent(form, gap):
    """Device 0's delta is +C·u or −C·u, u along w_t, so its cosine is +1 (weight H_0) or −1 (weight L_0); the
    others' deltas are −C·u (cosine −1: their weights at L). Device 0's base lies ``gap`` from theirs, along u."""
    cfg = alg("algorithm.staleness_limit=4", "algorithm.similarity=delta_vs_global")
    w_t = vec(1, 3.0)
    u = w_t / w_t.norm()
    bases = {T: w_t, T - 1: w_t - 0.5 * gap * u, T - 3: w_t + 0.5 * gap * u - 0.1 * vec(9)}
    bases[T - 3] = bases[T - 1] - gap * u  # the others' base, `gap` behind device 0's along u
    slots = [(0, T - 1, 30), (1, T - 3, 10), (2, T - 3, 20), (3, T - 3, 15)]

    def buffer(sign):
        return [update(d, bases[b] + (sign if d == 0 else -1) * 3 * C * u, b, n, job=d) for d, b, n in slots]

    one, other = buffer(+1), buffer(-1)
    got = [aggregate(cfg, form, ups, bases) for ups in (one, other)]
    assert [round(i["cos"], 9) for i in got[0].info] == [1.0, -1.0, -1.0, -1.0]
    assert [round(i["cos"], 9) for i in got[1].info] == [-1.0] * 4
    moved = float((got[0].new_global.to(F64) - got[1].new_global.to(F64)).norm())
    s = seafl_sensitivity(cfg, C, [d for d, _, _ in slots], [T - b for _, b, _ in slots], [n for _, _, n in slots],
                          form, distance(bases, one))
    assert s > 0 and moved == pytest.approx(s, rel=0.01)
    if form == "delta" or gap == 0.0:  # the bases do not enter: S = 2Cϑ·H_0 / (H_0 + L_others)
        (lo0, hi0), *rest = seafl_weight_bounds(cfg, [T - b for _, b, _ in slots], [n for _, _, n in slots])
        assert s == pytest.approx(2 * C * cfg.theta * hi0 / (hi0 + sum(lo for lo, _ in rest)), rel=1e-12)


@pytest.mark.parametrize("form", ["delta", "model"])
def test_random_neighbouring_buffers_never_move_it_by_more_than_s(form):
    cfg = alg("algorithm.staleness_limit=null", "algorithm.mu=2")
    bases = {v: vec(200 + v, 2.0) for v in range(T + 1)}
    slots = [(0, T, 10), (1, T - 2, 40), (0, T - 1, 25), (2, T - 4, 5)]  # device 0 twice (churn)
    for trial in range(40):
        g = torch.Generator().manual_seed(trial)

        def delta(i, sign=1.0):
            d = torch.randn(N, generator=g) * (0.5 + trial / 10)
            return sign * d if i != 0 else d

        ups = [update(d, bases[b] + delta(i), b, n, job=i) for i, (d, b, n) in enumerate(slots)]
        nb = [u if u.device != 0 else update(0, bases[u.base_version] + torch.randn(N, generator=g), u.base_version,
                                              u.n_samples, u.job) for u in ups]
        a, b = aggregate(cfg, form, ups, bases), aggregate(cfg, form, nb, bases)
        moved = float((a.new_global.to(F64) - b.new_global.to(F64)).norm())
        s = seafl_sensitivity(cfg, C, [d for d, _, _ in slots], [T - b for _, b, _ in slots],
                              [n for _, _, n in slots], form, distance(bases, ups))
        assert moved <= s * (1 + 1e-6)


def test_with_every_base_the_current_model_the_two_forms_agree():
    cfg = alg()
    bases = {T: vec(3)}
    ups = [update(d, bases[T] + vec(10 + d, 0.01), T, 10 + d, job=d) for d in range(4)]
    paper = seafl(cfg, T, bases[T], ups, bases.__getitem__, PARTS)
    on_deltas = seafl_on_deltas(cfg, bases[T], ups, paper, bases.__getitem__, PARTS)
    assert torch.allclose(on_deltas.new_global, paper.new_global, atol=1e-6)
    assert on_deltas.info is paper.info
    d = distance(bases, ups)
    args = (cfg, C, range(4), [0] * 4, [10, 11, 12, 13])
    assert seafl_sensitivity(*args, "model", d) == pytest.approx(seafl_sensitivity(*args, "delta"), rel=1e-12)


def test_on_stale_bases_eq_7_on_the_deltas_adds_each_change_to_the_current_model():
    cfg = alg("algorithm.theta=0.5")
    bases = {T: vec(4), T - 2: vec(5)}
    ups = [update(0, bases[T - 2] + vec(20, 0.1), T - 2), update(1, bases[T] + vec(21, 0.1), T, job=1)]
    paper = seafl(cfg, T, bases[T], ups, bases.__getitem__, PARTS)
    got = seafl_on_deltas(cfg, bases[T], ups, paper, bases.__getitem__, PARTS).new_global
    p = [i["weight"] for i in paper.info]
    want = bases[T] + 0.5 * (p[0] * (ups[0].flat - bases[T - 2]) + p[1] * (ups[1].flat - bases[T]))
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(got, paper.new_global, atol=1e-3)  # the paper's form mixes in the stale base


def test_seafl_and_seafl2_run_under_dp_and_the_form_is_checked():
    for name in ("seafl", "seafl2"):
        assert config_from_dict({}, [f"algorithm.name={name}", "privacy.enabled=true",
                                     "privacy.noise_multiplier=1"]).privacy.seafl_form == "delta"
    with pytest.raises(ConfigError, match="config key 'privacy.seafl_form' has value 'models'; allowed: one of delta, "
                                          "model"):
        config_from_dict({}, ["privacy.seafl_form=models"])
    with pytest.raises(ValueError, match="unknown SEAFL form 'x'"):
        seafl_sensitivity(alg(), C, [0], [0], [1], "x")
    assert math.isclose(seafl_sensitivity(alg(), C, [], [], []), 0.0)
