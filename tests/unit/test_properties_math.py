"""Properties, with Hypothesis, of the pieces whose correctness is a mathematical statement (issue 51): the codecs'
error bounds and byte counts and error feedback's conservation; the aggregation rules against Eq. 4–8, FedAsync's
mixing, FedBuff's step and FedAvg's mean written here in Python floats; the server optimizers against Reddi et al.'s
Algorithm 2 (and FedAvgM) written here, for every built-in rule, in both pseudo-gradient forms.

Every expected value is computed in this file from the documented formula; the profile (tests/conftest.py,
``seafl``) caps the examples so the whole file runs in well under a minute."""
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seafl_dist.algo import BufferedUpdate, ServerOptimizer, aggregate
from seafl_dist.codecs import UpdateCodec
from seafl_dist.codecs.feedback import ErrorFeedback
from seafl_dist.codecs.formats import QSGD, Half, Int8, TopK
from seafl_dist.settings import AlgorithmConfig, CompressionConfig
from seafl_dist.settings.server_opt import ServerOptConfig

T = torch.tensor
F32 = dict(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False)
# entries of any sign, ±0, tiny and large magnitudes
ENTRY = st.one_of(st.floats(-1e4, 1e4, **F32), st.sampled_from([0.0, -0.0, 1e-30, -1e-30]))


@st.composite
def tensors(draw, max_parts=3, max_size=12):
    """(v, sizes): a float32 vector cut into 1..max_parts parameter tensors; some constant, some of one entry."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_parts))
    parts = []
    for n in sizes:
        if draw(st.booleans()) and n > 1:  # a constant tensor
            parts += [draw(ENTRY)] * n
        else:
            parts += draw(st.lists(ENTRY, min_size=n, max_size=n))
    return T(parts, dtype=torch.float32), sizes


# ---- codecs ---------------------------------------------------------------------------------------------------

@given(tensors())
def test_int8_error_is_at_most_half_a_step_of_each_tensors_largest_magnitude(vs):
    v, sizes = vs
    codec = Int8(sizes)
    data = codec.encode(v, 0)
    assert data.numel() == codec.nbytes == 4 * len(sizes) + sum(sizes)
    out, lo = codec.decode(data), 0
    for n in sizes:
        part, got = v[lo:lo + n].tolist(), out[lo:lo + n].tolist()
        top = max(abs(x) for x in part)
        step = top / 127
        for x, y in zip(part, got):
            assert abs(y - x) <= step / 2 * (1 + 1e-5) + 1e-45
        i = max(range(n), key=lambda j: abs(part[j]))
        assert abs(got[i] - part[i]) <= top * 1e-6  # the extreme, of either sign, arrives (to float32 rounding)
        lo += n


@given(tensors(), st.sampled_from(["fp16", "bf16"]))
def test_half_precision_error_is_half_an_ulp_and_two_bytes_an_entry(vs, name):
    v, _ = vs
    v = v.clamp(-6e4, 6e4)  # fp16's largest finite is 65504
    fmt = Half(torch.float16 if name == "fp16" else torch.bfloat16, v.numel())
    data = fmt.encode(v, 0)
    assert data.numel() == fmt.nbytes == 2 * v.numel()
    mant, tiny = (10, 2.0 ** -24) if name == "fp16" else (7, 2.0 ** -133)  # bits after the point; least subnormal
    for x, y in zip(v.tolist(), fmt.decode(data).tolist()):
        assert abs(y - x) <= max(abs(x) * 2.0 ** -(mant + 1), tiny / 2) * (1 + 1e-6)
        assert y == 0 or math.copysign(1, y) == math.copysign(1, x)


@given(tensors(max_parts=1, max_size=40), st.floats(0.01, 1.0))
def test_top_k_sends_k_largest_magnitudes_exactly_in_8k_bytes(vs, fraction):
    v, _ = vs
    P = v.numel()
    fmt = TopK(P, fraction)
    k = min(P, max(1, math.ceil(fraction * P)))
    data = fmt.encode(v, 0)
    assert fmt.k == k and data.numel() == fmt.nbytes == 8 * k
    out = fmt.decode(data).tolist()
    idx = data[:4 * k].clone().view(torch.int32).tolist()
    assert idx == sorted(set(idx)) and len(idx) == k
    kept = set(idx)
    for i, x in enumerate(v.tolist()):
        assert out[i] == (x if i in kept else 0.0)
    if len(kept) < P:
        assert min(abs(v[i].item()) for i in kept) >= max(abs(v[i].item()) for i in range(P) if i not in kept)


@given(tensors(max_parts=1, max_size=40), st.integers(1, 16), st.integers(1, 16), st.integers(0, 2 ** 31))
def test_qsgd_entry_error_is_at_most_one_level_and_bytes_follow_the_formula(vs, levels, bucket, seed):
    v, _ = vs
    P = v.numel()
    fmt = QSGD(P, levels, bucket)
    width = math.ceil(math.log2(2 * levels + 1))
    nb = math.ceil(P / bucket)
    data = fmt.encode(v, seed)
    assert data.numel() == fmt.nbytes == 4 * nb + math.ceil(P * width / 8)
    out = fmt.decode(data).tolist()
    x = v.tolist()
    for b in range(nb):
        chunk = range(b * bucket, min(P, (b + 1) * bucket))
        norm = math.sqrt(sum(float(x[i]) ** 2 for i in chunk))
        for i in chunk:  # |Q(u)_i − u_i| ≤ ‖u‖/s: ξ_i is ⌊x_i⌋ or ⌊x_i⌋ + 1; the sign is kept
            assert abs(out[i] - x[i]) <= norm / levels * (1 + 1e-5) + 1e-30
            assert out[i] == 0 or (out[i] > 0) == (x[i] > 0)


LAYOUT = SimpleNamespace(kinds=("param", "param"), shapes=((3, 2), (5,)))


@given(st.lists(tensors(max_parts=1, max_size=11).filter(lambda t: t[0].numel() == 11), min_size=1, max_size=4),
       st.sampled_from([("topk", {"fraction": 0.2}), ("int8", {}), ("qsgd", {"levels": 2, "bucket": 4}),
                        ("bf16", {})]))
def test_error_feedback_sent_plus_residual_is_every_delta(deltas, spec):
    """Over a device's jobs: Σ sent + r_final = Σ Δ (Seide et al.'s conservation), to float32 rounding."""
    name, kw = spec
    c = UpdateCodec(CompressionConfig(codec=name, error_feedback=True, **kw), LAYOUT)
    fb, base = ErrorFeedback(), torch.zeros(11)
    total_sent, total_delta = [0.0] * 11, [0.0] * 11
    for job, (d, _) in enumerate(deltas):
        before = fb.residual.get(3, torch.zeros(11))
        w = c.decode(c.encode(base + d, base, job, fb, device=3, job=job, finish=float(job)), base)
        sent, r = (w - base).tolist(), fb.residual[3].tolist()
        for i in range(11):  # one job: sent + r = Δ + r_before (or r = 0 where that was not finite)
            assert sent[i] + r[i] == pytest.approx(d[i].item() + before[i].item(), rel=1e-5, abs=1e-3)
            total_sent[i] += sent[i]
            total_delta[i] += d[i].item()
    scale = max(1.0, max(abs(x) for d, _ in deltas for x in d.tolist()))
    for i in range(11):
        assert total_sent[i] + fb.residual[3][i].item() == pytest.approx(total_delta[i], abs=1e-4 * scale * len(deltas))


# ---- aggregation rules, written here ---------------------------------------------------------------------------

D = 4  # model entries


@st.composite
def buffers(draw, max_updates=4, max_stale=5):
    """(t, {version: w_v}, updates): t ≥ 1 and updates from versions t − S, S ≤ max_stale."""
    t = draw(st.integers(max_stale, max_stale + 3))
    vec = st.lists(st.floats(-3, 3, **F32), min_size=D, max_size=D)
    n = draw(st.integers(1, max_updates))
    stale = draw(st.lists(st.integers(0, max_stale), min_size=n, max_size=n))
    versions = {t: draw(vec), **{t - s: draw(vec) for s in stale}}
    ups = [BufferedUpdate(k, k, T(draw(vec)), draw(st.integers(1, 50)), t - s, 2) for k, s in enumerate(stale)]
    return t, {v: T(w) for v, w in versions.items()}, ups


def cos(x, y):
    nx, ny = math.sqrt(sum(a * a for a in x)), math.sqrt(sum(b * b for b in y))
    return 0.0 if nx == 0 or ny == 0 else max(-1.0, min(1.0, sum(a * b for a, b in zip(x, y)) / (nx * ny)))


def seafl_by_hand(t, versions, ups, alpha, beta, mu, theta):
    """Eq. 4–8 with delta_vs_global: (p_k normalised, w_{t+1})."""
    w_t, total_n = versions[t].tolist(), sum(u.n_samples for u in ups)
    raw = []
    for u in ups:
        delta = [a - b for a, b in zip(u.flat.tolist(), versions[u.base_version].tolist())]
        S = t - u.base_version
        gamma = alpha if beta is None or S + beta == 0 else alpha * beta / (S + beta)
        raw.append(u.n_samples / total_n * (gamma + mu * (cos(delta, w_t) + 1) / 2))
    if not sum(raw) > 0:
        return [0.0] * len(ups), w_t
    p = [r / sum(raw) for r in raw]
    w_new = [sum(pk * u.flat[i].item() for pk, u in zip(p, ups)) for i in range(D)]
    return p, [(1 - theta) * w_t[i] + theta * w_new[i] for i in range(D)]


@given(buffers(), st.floats(0, 5), st.one_of(st.none(), st.integers(5, 20)), st.floats(0, 3), st.floats(0.05, 1))
def test_seafl_is_eq_4_to_8_and_its_weights_a_convex_combination(buf, alpha, beta, mu, theta):
    assume(alpha > 0 or mu > 0)
    t, versions, ups = buf
    cfg = AlgorithmConfig(name="seafl", alpha=alpha, staleness_limit=beta, mu=mu, theta=theta)
    res = aggregate(cfg, t, versions[t], ups, versions.__getitem__)
    p, want = seafl_by_hand(t, versions, ups, alpha, beta, mu, theta)
    assert [d["weight"] for d in res.info] == pytest.approx(p, rel=1e-6, abs=1e-9)  # Θ of float32 deltas
    assert res.new_global.tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)
    if sum(p) > 0:
        assert sum(p) == pytest.approx(1.0) and all(0 <= x <= 1 for x in p)
        for i in range(D):  # w_{t+1} lies between w_t and the hull of the w_k (Eq. 8 of a convex Eq. 7)
            pts = [u.flat[i].item() for u in ups] + [versions[t][i].item()]
            assert min(pts) - 1e-5 <= res.new_global[i].item() <= max(pts) + 1e-5


def f_staleness(fn, S, a_poly=0.5, a_h=10.0, b_h=4.0):
    return {"constant": 1.0, "polynomial": (1 + S) ** -a_poly,
            "hinge": 1.0 if S <= b_h else 1 / (a_h * (S - b_h) + 1)}[fn]


@given(buffers(max_updates=3, max_stale=8), st.floats(0.01, 1), st.sampled_from(["constant", "polynomial", "hinge"]))
def test_fedasync_mixes_each_update_in_with_a_equal_mixing_times_f_of_s(buf, mixing, fn):
    t, versions, ups = buf
    cfg = AlgorithmConfig(name="fedasync", mixing=mixing, staleness_fn=fn, buffer_size=1)
    res = aggregate(cfg, t, versions[t], ups, versions.__getitem__)
    w = versions[t].tolist()
    a = [mixing * f_staleness(fn, t - u.base_version) for u in ups]
    for ak, u in zip(a, ups):
        w = [(1 - ak) * x + ak * y for x, y in zip(w, u.flat.tolist())]
    assert res.new_global.tolist() == pytest.approx(w, rel=1e-5, abs=1e-5)
    eff = [ak * math.prod(1 - aj for aj in a[k + 1:]) for k, ak in enumerate(a)]  # coefficient of w_k in w_{t+1}
    assert [d["weight"] for d in res.info] == pytest.approx(eff, rel=1e-9, abs=1e-12)


@given(buffers(), st.floats(0.1, 3), st.sampled_from(["none", "sqrt"]))
def test_fedbuff_steps_by_server_lr_times_the_mean_scaled_delta(buf, lr, scaling):
    t, versions, ups = buf
    res = aggregate(AlgorithmConfig(name="fedbuff", server_lr=lr, staleness_scaling=scaling), t, versions[t], ups,
                    versions.__getitem__)
    c = [lr * (1 if scaling == "none" else 1 / math.sqrt(1 + t - u.base_version)) / len(ups) for u in ups]
    want = [versions[t][i].item() + sum(ck * (u.flat[i].item() - versions[u.base_version][i].item())
                                        for ck, u in zip(c, ups)) for i in range(D)]
    assert res.new_global.tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert [d["weight"] for d in res.info] == pytest.approx(c)


@given(buffers(max_stale=0))
def test_fedavg_is_the_sample_weighted_mean_inside_the_hull(buf):
    t, versions, ups = buf
    res = aggregate(AlgorithmConfig(name="fedavg"), t, versions[t], ups, versions.__getitem__)
    n = sum(u.n_samples for u in ups)
    assert [d["weight"] for d in res.info] == pytest.approx([u.n_samples / n for u in ups])
    for i in range(D):
        pts = [u.flat[i].item() for u in ups]
        got = res.new_global[i].item()
        assert got == pytest.approx(sum(u.n_samples / n * p for u, p in zip(ups, pts)), rel=1e-5, abs=1e-5)
        assert min(pts) - 1e-5 <= got <= max(pts) + 1e-5


# ---- server optimizers: Reddi et al.'s Algorithm 2 for every rule -----------------------------------------------

def algorithm_2(name, deltas, x, eta, b1, b2, tau):
    """Algorithm 2 as printed (m_{−1} = 0, v_{−1} = τ², no bias correction); FedAvgM for momentum."""
    x, m, v = list(x), [0.0] * len(x), [tau ** 2] * len(x)
    for delta in deltas:
        for i, d in enumerate(delta):
            if name == "momentum":
                m[i] = b1 * m[i] + d
                x[i] += eta * m[i]
                continue
            m[i] = b1 * m[i] + (1 - b1) * d
            v[i] = {"adam": b2 * v[i] + (1 - b2) * d * d, "adagrad": v[i] + d * d,
                    "yogi": v[i] - (1 - b2) * d * d * ((v[i] - d * d > 0) - (v[i] - d * d < 0))}[name]
            x[i] += eta * m[i] / (math.sqrt(v[i]) + tau)
    return x


def delta_by_hand(rule, t, versions, ups, cfg):
    """Σ c_k Δ_k with each rule's coefficient of w_k (or Δ_k) written here."""
    if rule in ("seafl", "seafl2"):
        p, _ = seafl_by_hand(t, versions, ups, cfg.alpha, cfg.staleness_limit, cfg.mu, cfg.theta)
        c = [cfg.theta * pk for pk in p]
    elif rule == "fedavg":
        c = [u.n_samples / sum(w.n_samples for w in ups) for u in ups]
    elif rule == "fedbuff":
        c = [1 / len(ups)] * len(ups)
    else:  # fedasync: a_k Π_{j>k} (1 − a_j)
        a = [cfg.mixing * f_staleness(cfg.staleness_fn, t - u.base_version) for u in ups]
        c = [ak * math.prod(1 - aj for aj in a[k + 1:]) for k, ak in enumerate(a)]
    return [sum(ck * (u.flat[i].item() - versions[u.base_version][i].item()) for ck, u in zip(c, ups))
            for i in range(D)]


@pytest.mark.parametrize("form", ["model", "delta"])
@pytest.mark.parametrize("name", ["momentum", "adam", "yogi", "adagrad"])
@pytest.mark.parametrize("rule", ["seafl", "seafl2", "fedbuff", "fedasync", "fedavg"])
@settings(max_examples=8)  # 40 combinations, each enumerated
@given(steps=st.lists(buffers(max_updates=3), min_size=1, max_size=3), lr=st.floats(0.01, 1),
       b1=st.floats(0, 0.95), b2=st.floats(0.5, 0.999), tau=st.floats(1e-4, 0.1))
def test_every_optimizer_on_every_rule_is_algorithm_2(rule, name, form, steps, lr, b1, b2, tau):
    cfg = AlgorithmConfig(name=rule, staleness_limit=None if rule in ("fedbuff", "fedasync") else 10,
                          server_opt=ServerOptConfig(name=name, lr=lr, beta1=b1, beta2=b2, tau=tau,
                                                     pseudo_gradient=form))
    if rule == "fedavg":  # synchronous: every update from w_t
        steps = [(t, vs, [BufferedUpdate(u.device, u.job, u.flat, u.n_samples, t, 2) for u in ups])
                 for t, vs, ups in steps]
    opt, w = ServerOptimizer(cfg), None
    deltas, x0 = [], None
    for t, versions, ups in steps:
        if w is not None:
            versions = {**versions, t: w}  # the model the optimizer left is this step's w_t
        x0 = versions[t].tolist() if x0 is None else x0
        res = aggregate(cfg, t, versions[t], ups, versions.__getitem__)
        if form == "model":
            deltas.append([a - b for a, b in zip(res.new_global.double().tolist(), versions[t].double().tolist())])
        else:
            deltas.append(delta_by_hand(rule, t, versions, ups, cfg))
        w = opt.apply(versions[t], res, ups, versions.__getitem__)
    want = algorithm_2(name, deltas, x0, lr, b1, b2, tau)
    assert w.tolist() == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert opt.state.steps == len(steps)
