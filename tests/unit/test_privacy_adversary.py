"""Sensitivity checked by an adversary of its own (issue 50 D): for each rule, a search for the largest shift of the
pre-noise aggregate w′ between two neighbouring buffers (every update of one device D replaced, each delta of norm
≤ C, the schedule, n_k and the bases the same), with the rules' arithmetic written here from SPEC's Eq. and
docs/privacy.md, never with algo/ or privacy/. The found shift must never exceed the S privacy/sensitivity.py
gives, and S must be within 1.1× of it where docs/privacy.md calls the bound tight (FedBuff, FedAsync, FedAvg and
SEAFL's delta form: the pair D = C·u, D′ = −C·u with the others at −C·u reaches it).

The grid: each rule (SEAFL in both forms; asyncsgd, K = 1 in a run, a buffer of several here too), K = 1, 2, 3, 5,
10, staleness all 0, mixed and one far behind, equal and unequal n_k, a device twice in the buffer, and α, μ, ϑ, η_g,
α_mix, f and asyncsgd's τ_C at their edges; the adversary tries the extreme directions (along w_t, along the bases'
differences, the axes) and random ones."""
import dataclasses
import itertools
import math

import zlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seafl_dist.algo.types import BufferedUpdate, FlatParts
from seafl_dist.privacy.mechanism import Mechanism
from seafl_dist.settings import config_from_dict
from seafl_dist.settings.asyncsgd import AsyncSGDConfig

C = 0.7
DIM = 6
BASE_ALG = config_from_dict({}, []).algorithm


def unit(v):
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


# ---- the rules, from SPEC and the paper ------------------------------------------------------------

def gamma(alg, s):
    beta = alg.staleness_limit
    if beta is None or s + beta == 0:
        return alg.alpha
    return alg.alpha * beta / (s + beta)


def f_async(alg, s):
    if alg.staleness_fn == "constant":
        return 1.0
    if alg.staleness_fn == "polynomial":
        return (1.0 + s) ** -alg.poly_a
    return 1.0 if s <= alg.hinge_b else 1.0 / (alg.hinge_a * (s - alg.hinge_b) + 1.0)


def aggregate(rule, alg, w, bases, deltas, n, staleness):
    """w′ before noise: FedBuff, FedAsync (updates mixed in one after another), FedAvg, SEAFL Eq. 4-8 on the
    models (``seafl_model``) or Eq. 7 on the deltas (``seafl_delta``)."""
    k = len(deltas)
    if rule == "fedbuff":
        c = [1.0 if alg.staleness_scaling == "none" else 1.0 / math.sqrt(1.0 + s) for s in staleness]
        return w + alg.server_lr / k * sum(ci * d for ci, d in zip(c, deltas))
    if rule == "asyncsgd":  # Koloskova et al.'s step per update: η_i = η up to τ_C, min(η, c/S_i) above
        own = alg.asyncsgd
        return w + sum((own.lr if s <= own.tau_c else min(own.lr, own.c / s)) * d for d, s in zip(deltas, staleness))
    if rule == "fedasync":
        out = w
        for b, d, s in zip(bases, deltas, staleness):
            a = alg.mixing * f_async(alg, s)
            out = (1.0 - a) * out + a * (b + d)
        return out
    if rule == "fedavg":
        return sum(ni / sum(n) * (b + d) for ni, b, d in zip(n, bases, deltas))
    raw = []
    for ni, d, s in zip(n, deltas, staleness):
        nd, nw = float(np.linalg.norm(d)), float(np.linalg.norm(w))
        cos = float(d @ w) / (nd * nw) if nd > 0 and nw > 0 else 0.0
        raw.append(ni / sum(n) * (gamma(alg, s) + alg.mu * (cos + 1.0) / 2.0))
    total = sum(raw)
    if not total > 0:
        return w
    p = [r / total for r in raw]
    if rule == "seafl_delta":
        return w + alg.theta * sum(pk * d for pk, d in zip(p, deltas))
    return (1.0 - alg.theta) * w + alg.theta * sum(pk * (b + d) for pk, b, d in zip(p, bases, deltas))


MECHANISMS: dict = {}
VERSION = 20  # the current version t; update i's base is version t − S_i


def code_s(rule, alg, devices, staleness, n, bases):
    """S as a run computes it: the mechanism's aggregate (privacy/mechanism.py) on this buffer, its event's
    ``sensitivity`` (for SEAFL's model form, the bases' distances read from the base models themselves)."""
    form = rule.split("_")[1] if rule.startswith("seafl") else "delta"
    if form not in MECHANISMS:
        cfg = config_from_dict({}, ["privacy.enabled=true", "privacy.noise_multiplier=1", f"privacy.clipping_bound={C}",
                                    f"privacy.seafl_form={form}", "privacy.seeded_noise=true"])  # S, not the noise
        MECHANISMS[form] = Mechanism(cfg, FlatParts.all_params(DIM), SimpleNamespace(names=("w",), shapes=((DIM,),)),
                                     say=False)
    by_version = {VERSION - int(s): torch.tensor(b) for s, b in zip(staleness, bases)}
    by_version.setdefault(VERSION, torch.tensor(bases[0]))
    ups = [BufferedUpdate(device=d, job=i, flat=by_version[VERSION - int(s)].clone(), n_samples=int(m),
                          base_version=VERSION - int(s), epochs=1) for i, (d, s, m) in enumerate(zip(devices, staleness, n))]
    ev = {"updates": [{"device": d} for d in devices]}
    MECHANISMS[form].inclusions.clear()  # m stays 1: ε is dp-accounting's for m = 1 only (cached), not S's concern
    MECHANISMS[form].aggregate(ev, alg, VERSION, by_version[VERSION], ups, by_version.__getitem__,
                               FlatParts.all_params(DIM))
    return ev["privacy"]["sensitivity"]


# ---- the adversary -----------------------------------------------------------------------------------

def largest_shift(rule, alg, w, bases, devices, n, staleness, rng, trials=16, bound=C):
    """The largest ‖w′ − w″‖ found over neighbours replacing every update of one device (deltas of norm ≤ ``bound``)."""
    C = bound  # noqa: N806 (the clipping bound of this search)
    k = len(devices)
    mine_of = {d: [i for i in range(k) if devices[i] == d] for d in set(devices)}
    directions = [unit(w), -unit(w)] + [unit(bases[i] - bases[j]) for i in range(k) for j in range(k) if i < j and
                                        np.linalg.norm(bases[i] - bases[j]) > 0][:6] + list(np.eye(DIM))
    best = 0.0

    def shift(mine, own, own2, others):
        a, b = list(others), list(others)
        for i in mine:
            a[i], b[i] = own, own2
        return float(np.linalg.norm(aggregate(rule, alg, w, bases, a, n, staleness) -
                                    aggregate(rule, alg, w, bases, b, n, staleness)))

    for mine in mine_of.values():
        for u in directions:
            for other in (-C * u, C * u, 0 * u, C * unit(rng.normal(size=DIM))):
                best = max(best, shift(mine, C * u, -C * u, [other] * k),
                           shift(mine, -C * u, C * u, [other] * k))
            best = max(best, shift(mine, C * u, 0 * u, [-C * u] * k))
            near = C * unit(-u + 0.02 * unit(rng.normal(size=DIM)))  # nearly −u: a weight just above 0 (α = 0)
            best = max(best, shift(mine, C * u, near, [-C * u] * k))
        for _ in range(trials):
            others = [C * rng.uniform(0, 1) * unit(rng.normal(size=DIM)) for _ in range(k)]
            best = max(best, shift(mine, C * unit(rng.normal(size=DIM)), C * unit(rng.normal(size=DIM)), others))
    return best


STALENESS = {"fresh": lambda k, rng: [0] * k, "mixed": lambda k, rng: list(rng.integers(0, 5, size=k)),
             "one_behind": lambda k, rng: [0] * (k - 1) + [9]}
EDGES = {
    "fedbuff": [dict(server_lr=1.0, staleness_scaling="none"), dict(server_lr=0.5, staleness_scaling="sqrt")],
    "fedasync": [dict(mixing=1.0, staleness_fn="constant"), dict(mixing=0.6, staleness_fn="polynomial"),
                 dict(mixing=0.9, staleness_fn="hinge", hinge_b=2.0)],
    "fedavg": [dict()],
    "asyncsgd": [dict(asyncsgd=AsyncSGDConfig(lr=1.0, tau_c=0, c=1.0)),
                 dict(asyncsgd=AsyncSGDConfig(lr=0.5, tau_c=4, c=2.0))],
    "seafl_delta": [dict(alpha=0.0, mu=1.0, theta=1.0), dict(alpha=3.0, mu=0.0, theta=0.2),
                    dict(alpha=3.0, mu=1.0, theta=0.8, staleness_limit=None), dict(alpha=0.5, mu=4.0, theta=1.0)],
    "seafl_model": [dict(alpha=3.0, mu=0.0, theta=1.0), dict(alpha=3.0, mu=1.0, theta=0.2),
                    dict(alpha=0.5, mu=4.0, theta=1.0, staleness_limit=None)],
}
TIGHT = ("fedbuff", "fedasync", "fedavg", "asyncsgd", "seafl_delta")


def cases(rule):
    rng = np.random.default_rng(zlib.crc32(rule.encode()))
    for k, (pattern, stale), edge in itertools.product((1, 2, 3, 5, 10), STALENESS.items(), EDGES[rule]):
        if rule == "fedavg" and pattern != "fresh":
            continue  # every FedAvg job starts from w_t
        staleness = stale(k, rng)
        twice = k >= 2 and rng.random() < 0.5  # device 0 twice in the buffer (churn can do it)
        devices = [0, 0, *range(1, k - 1)] if twice else list(range(k))
        n = [10] * k if rng.random() < 0.5 else list(rng.integers(1, 60, size=k))
        w = rng.normal(size=DIM)
        spread = 0.0 if rule == "fedavg" else (5.0 if rule == "seafl_model" else 1.0)
        base_of = {st: w if st == 0 else w + spread * rng.normal(size=DIM) for st in set(staleness)}  # w_{t − S}
        bases = [base_of[st] for st in staleness]
        yield (k, pattern, edge, devices, n, staleness, w, bases, rng)


@pytest.mark.parametrize("rule", list(EDGES))
def test_no_neighbour_moves_the_aggregate_further_than_s(rule):
    checked = 0
    for k, pattern, edge, devices, n, staleness, w, bases, rng in cases(rule):
        alg = dataclasses.replace(BASE_ALG, name=rule.split("_")[0], **edge)
        s = code_s(rule, alg, devices, staleness, n, bases)
        found = largest_shift(rule, alg, w, bases, devices, n, staleness, rng)
        where = f"{rule} K={k} {pattern} {edge} devices={devices} n={n} staleness={staleness}"
        assert found <= s * (1 + 1e-9) + 1e-12, f"{where}: a neighbour moves w′ by {found:.6g} > S = {s:.6g}"
        if rule in TIGHT:
            assert s <= 1.1 * found, f"{where}: S = {s:.6g} but the largest shift found is {found:.6g}"
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("ahead", [0.0, 0.3, 5.0])
def test_the_model_forms_bound_is_reached_with_ds_base_ahead_along_u(ahead):
    """docs/privacy.md: the model form's S is reached by D = C·u against −C·u, u along w_t, the others at −C·u,
    with D's base ``ahead`` of the others' along u (the others' weights at their lowest, R = L_−D)."""
    alg = dataclasses.replace(BASE_ALG, name="seafl", alpha=3.0, mu=1.0, theta=0.8)
    w = np.array([2.0, 0, 0, 0, 0, 0])
    u = unit(w)
    k = 4
    bases = [w + ahead * u] + [w] * (k - 1)
    staleness, n, devices = [1, 0, 0, 0], [10] * k, list(range(k))
    s = code_s("seafl_model", alg, devices, staleness, n, bases)
    others = [-C * u] * k
    a, b = list(others), list(others)
    a[0], b[0] = C * u, -C * u
    reached = float(np.linalg.norm(aggregate("seafl_model", alg, w, bases, a, n, staleness) -
                                   aggregate("seafl_model", alg, w, bases, b, n, staleness)))
    assert reached <= s * (1 + 1e-9) and s <= 1.1 * reached


def test_alpha_0_breaks_the_model_forms_bound_so_it_is_refused():
    """With α = 0 every weight can be 0, and the paper's Eq. 7 then returns w_t: a one-device buffer with a stale
    base moves w′ by ϑ(‖b − w_t‖ + C) against S = 2ϑC. Hence the refusal under DP."""
    alg = dataclasses.replace(BASE_ALG, name="seafl", alpha=0.0, mu=1.0, theta=0.8)
    w = np.array([1.0, 0, 0, 0, 0, 0])
    bases = [w + np.array([0, 14.0, 0, 0, 0, 0])]
    s = code_s("seafl_model", alg, [0], [3], [10], bases)
    found = largest_shift("seafl_model", alg, w, bases, [0], [10], [3], np.random.default_rng(0))
    assert found > 5 * s
    from seafl_dist.settings.errors import ConfigError
    with pytest.raises(ConfigError, match="privacy.seafl_form=model"):
        config_from_dict({}, ["algorithm.alpha=0", "privacy.enabled=true", "privacy.noise_multiplier=1",
                              "privacy.seafl_form=model"])
    config_from_dict({}, ["algorithm.alpha=0", "privacy.enabled=true", "privacy.noise_multiplier=1"])  # delta: fine


# ---- adaptive clipping (privacy.adaptive_clip, issue 67 item 4) ----------------------------------------------

C_T, Z_TOTAL, SIGMA_B = 0.25, 1.0, 3.0  # C_t moved from C = 0.7; the run's z; the count's σ_b


def code_adaptive(rule, alg, devices, staleness, n, bases):
    """What a run under adaptive clipping at C_t = C_T releases for this buffer: the event's S and noise std, and the
    std the mechanism drew the count with (privacy/mechanism.py, its count draw intercepted)."""
    form = rule.split("_")[1] if rule.startswith("seafl") else "delta"
    cfg = config_from_dict({}, ["privacy.enabled=true", f"privacy.noise_multiplier={Z_TOTAL}", f"privacy.clipping_bound={C}",
                                f"privacy.seafl_form={form}", "privacy.seeded_noise=true",
                                "privacy.adaptive_clip.enabled=true", f"privacy.adaptive_clip.count_std={SIGMA_B}"])
    mech = Mechanism(cfg, FlatParts.all_params(DIM), SimpleNamespace(names=("w",), shapes=((DIM,),)), say=False)
    mech.load({"inclusions": {}, "clipped": 0, "zeroed": 0, "adaptive_clip": {"bound": C_T, "used": C_T}})
    stds = []
    mech._count_draw = lambda t: (lambda count, std: stds.append(std) or float(count))
    by_version = {VERSION - int(s): torch.tensor(b) for s, b in zip(staleness, bases)}
    by_version.setdefault(VERSION, torch.tensor(bases[0]))
    ups = [BufferedUpdate(device=d, job=i, flat=by_version[VERSION - int(s)].clone(), n_samples=int(m),
                          base_version=VERSION - int(s), epochs=1) for i, (d, s, m) in enumerate(zip(devices, staleness, n))]
    ev = {"updates": [{"device": d} for d in devices]}
    mech.aggregate(ev, alg, VERSION, by_version[VERSION], ups, by_version.__getitem__, FlatParts.all_params(DIM))
    assert ev["privacy"]["clipping_bound"] == C_T and len(stds) == 1
    return ev["privacy"]["sensitivity"], ev["privacy"]["noise_std"], stds[0]


def largest_count_shift(devices, bound, rng):
    """The largest |Σ_k 1[‖Δ_k‖ ≤ C] − Σ_k 1[‖Δ′_k‖ ≤ C]| over neighbours replacing one device's updates, each norm
    anything in [0, 3C] (the paper's b_k, counted here)."""
    best = 0
    for d in set(devices):
        mine = [i for i, x in enumerate(devices) if x == d]
        for _ in range(32):
            norms = rng.uniform(0, 3 * bound, size=len(devices))
            other = norms.copy()
            other[mine] = rng.uniform(0, 3 * bound, size=len(mine))
            for extreme in (None, 0.0, 3 * bound):  # all of d's within, or all above, against the draw
                if extreme is not None:
                    other[mine] = extreme
                best = max(best, abs(int((norms <= bound).sum()) - int((other <= bound).sum())))
    return best


@pytest.mark.parametrize("rule", ["fedbuff", "fedasync", "fedavg", "asyncsgd", "seafl_delta", "seafl_model"])
def test_under_adaptive_clipping_the_update_and_the_count_together_are_one_gaussian_of_z(rule):
    """At C_t = C_T, no neighbour (deltas of norm ≤ C_t) moves w′ further than the event's S, S is tight where the
    fixed bound's is, and the release of w′ + N(0, (z_Δ S)²) and of the count + N(0, σ²) moves, in units of its noise,
    by at most 1/z: (shift/σ_w)² + (count shift/σ_count)² ≤ z⁻² — the accounting's claim (the paper's §3.1 under
    replace-one), equal for a tight rule with a device whose updates can all flip."""
    checked = 0
    for k, pattern, edge, devices, n, staleness, w, bases, rng in itertools.islice(cases(rule), 0, None, 1 if rule == "fedavg" else 4):  # FedAvg has 5
        alg = dataclasses.replace(BASE_ALG, name=rule.split("_")[0], **edge)
        s, noise_std, count_std = code_adaptive(rule, alg, devices, staleness, n, bases)
        found = largest_shift(rule, alg, w, bases, devices, n, staleness, rng, trials=8, bound=C_T)
        flips = largest_count_shift(devices, C_T, rng)
        where = f"{rule} K={k} {pattern} {edge} devices={devices}"
        assert found <= s * (1 + 1e-9) + 1e-12, f"{where}: a neighbour moves w′ by {found:.6g} > S = {s:.6g}"
        assert flips == max(devices.count(d) for d in devices)  # the adversary flips every update of one device
        units = (found / noise_std) ** 2 + (flips / count_std) ** 2 if noise_std > 0 else 0.0
        assert units <= Z_TOTAL ** -2 * (1 + 1e-9), f"{where}: moves {math.sqrt(units):.6g} noise units > 1/z"
        if rule in TIGHT and found > 0:
            assert s <= 1.1 * found and units >= Z_TOTAL ** -2 / 1.1 ** 2, where
        checked += 1
    assert checked >= 5
