"""The defenses (seafl_dist/defenses/, ``algorithm.defense``) against implementations written here from the papers,
one straightforward loop each, on buffers Hypothesis generates; and every refusal, at both sides of its edge.

Buffers hold small whole numbers (deltas in [−8, 8], models in [−20, 20]), so every distance, score and sum of the
code and of these loops is exact in float64 and a tie is a true tie: the selections must agree exactly, and the
means to rounding. Oracles:

- Krum (Blanchard et al. 2017): score(i) = Σ of the n − f − 2 smallest ‖Δ_i − Δ_j‖², j ≠ i; Krum keeps the lowest,
  Multi-Krum the m lowest (m = n − f by default); ties to the earlier update.
- Bulyan (El Mhamdi et al. 2018): Krum applied θ = n − 2f times to the updates left; then per coordinate the mean
  of the θ − 2f values closest to the median.
- Median and trimmed mean (Yin et al. 2018): per coordinate; the trimmed mean drops ⌊βn⌋ values at each end.
- Centered clipping (Karimireddy et al. 2021): v ← v + (1/n) Σ_k min(1, τ/‖Δ_k − v‖)(Δ_k − v), L times, v from
  the previous aggregation (0 at the first).
"""
import math
import statistics
import subprocess
import sys
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from seafl_dist.algo import BufferedUpdate, FlatParts, aggregate, memory_of
from seafl_dist.defenses import DEFENSES
from seafl_dist.defenses import geometry
from seafl_dist.defenses.estimators import NETWORK_MAX, nearest_window, sorted_columns
from seafl_dist.defenses.geometry import Deltas, pairwise_sq_distances
from seafl_dist.settings import ConfigError, config_from_dict, dump_config
from seafl_dist.settings.defense import ESTIMATORS, FILTERS, SERVER_HELD

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T = 5  # the current version: updates start from versions T − 2 .. T


def config(*overrides, k=5, m=20):
    return config_from_dict({}, [f"algorithm.buffer_size={k}", f"devices.concurrency={m}", *overrides])


# ---- buffers -------------------------------------------------------------------------------------------------

@st.composite
def buffers(draw, n_min=3, n_max=11, counters=False):
    """(w_t, bases {v: w_v}, updates, parts): n updates of d whole-number entries (the last two a batch-norm
    statistic and a counter when ``counters``)."""
    n = draw(st.integers(n_min, n_max))
    d = draw(st.integers(2, 6)) + (2 if counters else 0)
    ints = st.integers(-20, 20)
    bases = {v: [float(draw(ints)) for _ in range(d)] for v in range(T - 2, T + 1)}
    if counters:
        for v in bases:
            bases[v][-1] = float(10 + v)  # num_batches_tracked: grows with the version
    updates = []
    for k in range(n):
        v = draw(st.integers(T - 2, T))
        delta = [float(draw(st.integers(-8, 8))) for _ in range(d)]
        if counters:
            delta[-1] = float(draw(st.integers(1, 4)))  # steps trained
        updates.append(BufferedUpdate(device=k, job=k, n_samples=draw(st.integers(1, 50)), base_version=v, epochs=1,
                                      flat=torch.tensor([b + x for b, x in zip(bases[v], delta)])))
    parts = None
    if counters:
        params = torch.tensor([True] * (d - 2) + [False, False])
        parts = FlatParts(params, torch.tensor([False] * (d - 2) + [True, False]),
                          torch.tensor([False] * (d - 1) + [True]))
    return torch.tensor(bases[T]), {v: torch.tensor(w) for v, w in bases.items()}, updates, parts


def deltas_of(bases, updates):
    """Δ_k = w_k − w_{t_k} as lists of floats (float64 arithmetic on whole numbers: exact)."""
    return [[float(a) - float(b) for a, b in zip(u.flat.tolist(), bases[u.base_version].tolist())] for u in updates]


def sq(a, b, idx):
    return sum((a[i] - b[i]) ** 2 for i in idx)


# ---- oracles, from the papers --------------------------------------------------------------------------------

def oracle_scores(vectors, f, idx):
    n = len(vectors)
    out = []
    for i in range(n):
        dists = sorted(sq(vectors[i], vectors[j], idx) for j in range(n) if j != i)
        out.append(sum(dists[:max(0, n - f - 2)]))
    return out


def oracle_multi_krum(vectors, f, m, idx):
    """Positions Multi-Krum keeps, in no particular order."""
    scores = oracle_scores(vectors, f, idx)
    order = sorted(range(len(vectors)), key=lambda i: (scores[i], i))
    return set(order[:m])


def oracle_bulyan_selection(vectors, f, idx):
    left, chosen = list(range(len(vectors))), []
    for _ in range(len(vectors) - 2 * f):
        scores = oracle_scores([vectors[i] for i in left], f, idx)
        best = min(range(len(left)), key=lambda j: (scores[j], j))
        chosen.append(left.pop(best))
    return set(chosen)


def oracle_coordinate(vectors, name, beta=0.0, f=0):
    n, d = len(vectors), len(vectors[0])
    out = []
    for c in range(d):
        col = sorted(v[c] for v in vectors)
        if name == "median":
            out.append(statistics.median(col))
        elif name == "trimmed_mean":
            b = math.floor(Fraction(str(beta)) * n)
            out.append(sum(col[b:n - b]) / (n - 2 * b))
        else:  # bulyan's: the n − 2f closest to the median, ties to the smaller value
            med = statistics.median(col)
            near = sorted(range(n), key=lambda i: (abs(col[i] - med), i))[:n - 2 * f]
            out.append(sum(col[i] for i in near) / len(near))
    return out


def oracle_centered_clipping(vectors, centre, tau, iterations, idx):
    v = list(centre)
    for _ in range(iterations):
        step = [0.0] * len(v)
        for x in vectors:
            r = math.sqrt(sum((x[i] - v[i]) ** 2 for i in idx))
            s = 1.0 if r == 0 else min(1.0, tau / r)
            for i in range(len(v)):
                step[i] += s * (x[i] - v[i]) / len(vectors)
        v = [a + b for a, b in zip(v, step)]
    return v


def step_of(w_t, est, lr=1.0):
    return [w + lr * e for w, e in zip(w_t.tolist(), est)]


def params_idx(parts, d):
    return range(d) if parts is None else [i for i in range(d) if bool(parts.params[i])]


def with_counters(expected, w_t, updates, parts):
    """Counters take the largest of w_t's and the kept models' (every rule's)."""
    if parts is not None:
        for i in range(len(expected)):
            if bool(parts.counters[i]):
                expected[i] = max([w_t[i].item()] + [u.flat[i].item() for u in updates])
    return expected


def run(cfg, w_t, bases, updates, parts, memory=None):
    return aggregate(cfg.algorithm, T, w_t, updates, bases.__getitem__, parts, memory=memory)


# ---- the registry and off ------------------------------------------------------------------------------------

def test_the_registry_names_every_defense_the_config_takes():
    assert set(DEFENSES) == set(FILTERS) | set(ESTIMATORS)
    assert {n for n, d in DEFENSES.items() if d.kind == "filter"} == set(FILTERS)
    assert [n for n, d in DEFENSES.items() if d.stateful] == ["centered_clipping", "zenopp", "asyncfilter"]


def test_off_leaves_config_yaml_and_the_rules_memory_as_they_were():
    assert "defense" not in dump_config(config("algorithm.name=fedbuff"))
    on = config("algorithm.name=fedbuff", "algorithm.defense.name=median")
    assert "defense:\n    name: median" in dump_config(on)
    assert not memory_of(config("algorithm.name=fedbuff").algorithm).stateful
    assert memory_of(config("algorithm.name=fedbuff", "algorithm.defense.name=centered_clipping").algorithm).stateful


def test_the_room_imports_first_in_a_fresh_interpreter():
    """defenses/ imports algo/ and algo/dispatch.py imports defenses/: either may be the first import."""
    code = "import seafl_dist.defenses.stage, seafl_dist.defenses; from seafl_dist.algo import aggregate"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---- pairwise distances ----------------------------------------------------------------------------------------

@SETTINGS
@given(buffers(counters=True), st.sampled_from([1, 2, 1 << 19]))
def test_pairwise_distances_equal_the_loop_over_pairs_in_any_block_size(buf, chunk):
    w_t, bases, updates, parts = buf
    old, geometry.CHUNK = geometry.CHUNK, chunk  # blocks of 1 and 2 coordinates: the sum over blocks is exercised
    try:
        got = pairwise_sq_distances(Deltas(updates, bases.__getitem__, w_t), parts.params)
    finally:
        geometry.CHUNK = old
    vec = deltas_of(bases, updates)
    idx = params_idx(parts, len(vec[0]))
    assert got.dtype == torch.float64
    assert got.tolist() == [[sq(a, b, idx) for b in vec] for a in vec]


@pytest.mark.parametrize("n", [1, 2, 3, 10, NETWORK_MAX, NETWORK_MAX + 1, 40])
def test_the_columns_are_sorted_as_a_sort_sorts_them_on_either_side_of_the_network_limit(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-3, 4, (n, 257), generator=g).to(torch.float64)  # many ties
    x[:, :5] = torch.randn(n, 5, generator=g, dtype=torch.float64)
    got = sorted_columns(x)
    assert torch.equal(got, torch.tensor([sorted(col) for col in x.T.tolist()], dtype=torch.float64).T)
    assert got is not x


@SETTINGS
@given(st.integers(1, 30), st.data())
def test_the_window_nearest_the_median_holds_the_values_a_sort_by_distance_picks(n, data):
    """Bulyan's coordinate phase: the window grown from the median equals the first of the values sorted by
    (distance to the median, position), as a multiset (equal values may trade places)."""
    size = data.draw(st.integers(1, n))
    cols = data.draw(st.lists(st.lists(st.integers(-4, 4), min_size=n, max_size=n), min_size=1, max_size=6))
    x = torch.tensor([sorted(c) for c in cols], dtype=torch.float64).T
    got = x.gather(0, nearest_window(x, size))
    for j, col in enumerate(cols):
        col, med = sorted(col), statistics.median(col)
        want = sorted(col[i] for i in sorted(range(n), key=lambda i: (abs(col[i] - med), i))[:size])
        assert sorted(got[:, j].tolist()) == want


# ---- filters ---------------------------------------------------------------------------------------------------

@SETTINGS
@given(buffers(counters=True), st.integers(0, 2), st.sampled_from(["krum", "multikrum"]), st.data())
def test_krum_and_multi_krum_drop_what_the_paper_drops_and_fedbuff_averages_the_rest(buf, f, name, data):
    w_t, bases, updates, parts = buf
    n = len(updates)
    if n < 2 * f + 3:
        f = (n - 3) // 2
    keep = data.draw(st.one_of(st.none(), st.integers(1, n - f))) if name == "multikrum" else None
    cfg = config("algorithm.name=fedbuff", f"algorithm.defense.name={name}", f"algorithm.defense.f={f}",
                 f"algorithm.defense.keep={'null' if keep is None else keep}", k=n)
    result = run(cfg, w_t, bases, updates, parts)
    vec = deltas_of(bases, updates)
    m = 1 if name == "krum" else (n - f if keep is None else keep)
    kept = oracle_multi_krum(vec, f, m, params_idx(parts, len(vec[0])))
    assert {i for i, d in enumerate(result.info) if not d["rejected"]} == kept
    assert all(d["reason"].startswith(f"{name}: score ") for d in result.info if d["rejected"])
    mean = [sum(vec[i][c] for i in kept) / len(kept) for c in range(len(vec[0]))]
    expected = with_counters(step_of(w_t, mean), w_t, [updates[i] for i in kept], parts)
    assert torch.allclose(result.new_global, torch.tensor(expected), rtol=1e-6, atol=1e-5)


@SETTINGS
@given(buffers(n_min=5, n_max=9), st.sampled_from(["seafl", "fedavg", "port"]))
def test_a_filter_works_with_every_rule_which_weights_what_is_left(buf, rule):
    """SEAFL, FedAvg (K = M = n) and Port under Multi-Krum with f = 1: the result is the rule's on the kept updates
    alone."""
    w_t, bases, updates, parts = buf
    n = len(updates)
    k = n if rule == "fedavg" else 5
    plain = config(f"algorithm.name={rule}", k=k, m=n)
    guarded = config(f"algorithm.name={rule}", "algorithm.defense.name=multikrum", "algorithm.defense.f=1", k=k, m=n)
    result = run(guarded, w_t, bases, updates, parts)
    kept = sorted(oracle_multi_krum(deltas_of(bases, updates), 1, n - 1, range(w_t.numel())))
    assert [i for i, d in enumerate(result.info) if not d["rejected"]] == kept
    alone = run(plain, w_t, bases, [updates[i] for i in kept], parts)
    assert torch.equal(result.new_global, alone.new_global)


def test_fedasyncs_buffer_of_one_is_below_any_filters_least():
    assert "at least 3" in refused("algorithm.name=fedasync", "algorithm.defense.name=krum", "algorithm.defense.f=0")


@SETTINGS
@given(buffers(n_min=7, n_max=11), st.integers(1, 2))
def test_multi_krum_under_seafl_drops_the_papers_updates_and_seafl_weights_the_rest(buf, f):
    w_t, bases, updates, parts = buf
    n = len(updates)
    f = min(f, (n - 3) // 2)
    cfg = config("algorithm.name=seafl", "algorithm.defense.name=multikrum", f"algorithm.defense.f={f}", k=2 * f + 3)
    result = run(cfg, w_t, bases, updates, parts)
    kept = sorted(oracle_multi_krum(deltas_of(bases, updates), f, n - f, range(w_t.numel())))
    assert [i for i, d in enumerate(result.info) if not d["rejected"]] == kept
    alone = run(config("algorithm.name=seafl", k=2 * f + 3), w_t, bases, [updates[i] for i in kept], parts)
    assert torch.equal(result.new_global, alone.new_global)
    assert [d["weight"] for d in result.info if not d["rejected"]] == [d["weight"] for d in alone.info]


def test_a_buffer_the_value_check_shrank_below_krums_least_is_dropped_whole_with_the_numbers():
    w_t = torch.zeros(3)
    updates = [BufferedUpdate(device=k, job=k, n_samples=1, base_version=T, epochs=1,
                              flat=torch.tensor([float(k), 1.0, float("nan") if k < 2 else 2.0])) for k in range(6)]
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=krum", "algorithm.defense.f=1", k=5)
    result = run(cfg, w_t, {T: w_t}, updates, None)
    assert [d["reason"] for d in result.info[:2]] == ["non-finite"] * 2
    assert {d["reason"] for d in result.info[2:]} == {"krum: 4 updates to screen, fewer than the 5 it needs with f=1"}
    assert torch.equal(result.new_global, w_t)
    result = run(cfg, w_t, {T: w_t}, updates[1:] + [updates[-1]], None)  # 5 finite: at the edge, screened
    assert sum(not d["rejected"] for d in result.info) == 1


@SETTINGS
@given(buffers(n_min=5, n_max=9))
def test_krum_screens_only_what_the_update_guard_kept(buf):
    """An update the guard rejects (norm > 2 × the buffer's median) keeps the guard's reason and is no candidate of
    Krum's: the scores are those of the others alone."""
    w_t, bases, updates, parts = buf
    huge = BufferedUpdate(device=99, job=99, n_samples=1, base_version=T, epochs=1, flat=w_t + 1000.0)
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=multikrum", "algorithm.defense.f=1",
                 "algorithm.update_norm_factor=2", k=5)
    result = run(cfg, w_t, bases, [huge, *updates], parts)
    assert result.info[0]["reason"].startswith("update norm ")
    left = [i for i, d in enumerate(result.info[1:]) if not d["rejected"] or not d["reason"].startswith("update")]
    vec = deltas_of(bases, [updates[i] for i in left])
    kept = {left[j] for j in oracle_multi_krum(vec, 1, len(left) - 1, range(w_t.numel()))} if len(left) >= 5 else set()
    assert {i for i, d in enumerate(result.info[1:]) if not d["rejected"]} == kept


# ---- estimators ------------------------------------------------------------------------------------------------

@SETTINGS
@given(buffers(counters=True), st.sampled_from(["median", "trimmed_mean"]),
       st.sampled_from([0.0, 0.1, 0.2, 0.25, 0.3, 0.45, 0.49]), st.sampled_from([1.0, 0.5]))
def test_median_and_trimmed_mean_are_the_papers_per_coordinate(buf, name, beta, lr):
    w_t, bases, updates, parts = buf
    cfg = config("algorithm.name=fedbuff", f"algorithm.defense.name={name}", f"algorithm.defense.beta={beta}",
                 f"algorithm.server_lr={lr}", k=2)
    result = run(cfg, w_t, bases, updates, parts)
    est = oracle_coordinate(deltas_of(bases, updates), name, beta=beta)
    expected = with_counters(step_of(w_t, est, lr), w_t, updates, parts)
    assert torch.allclose(result.new_global, torch.tensor(expected), rtol=1e-6, atol=1e-5)
    assert [d["weight"] for d in result.info] == [lr / len(updates)] * len(updates)  # FedBuff's coefficient
    assert not any(d["rejected"] for d in result.info)


@SETTINGS
@given(buffers(n_min=3, n_max=6))
def test_the_trimmed_mean_at_beta_zero_is_fedbuffs_mean(buf):
    w_t, bases, updates, parts = buf
    mean = run(config("algorithm.name=fedbuff", "algorithm.defense.name=trimmed_mean", "algorithm.defense.beta=0",
                      k=2), w_t, bases, updates, parts)
    fedbuff = run(config("algorithm.name=fedbuff", k=2), w_t, bases, updates, parts)
    assert torch.allclose(mean.new_global, fedbuff.new_global, rtol=1e-6, atol=1e-6)


@SETTINGS
@given(buffers(n_min=3, n_max=8))
def test_staleness_scaling_scales_each_delta_before_the_estimator(buf):
    w_t, bases, updates, parts = buf
    cfg = config("algorithm.name=fedbuff", "algorithm.staleness_scaling=sqrt", "algorithm.defense.name=median", k=2)
    result = run(cfg, w_t, bases, updates, parts)
    vec = [[x / math.sqrt(1 + T - u.base_version) for x in row] for row, u in zip(deltas_of(bases, updates), updates)]
    assert torch.allclose(result.new_global, torch.tensor(step_of(w_t, oracle_coordinate(vec, "median"))),
                          rtol=1e-6, atol=1e-6)


@SETTINGS
@given(buffers(n_min=7, n_max=11, counters=True), st.integers(0, 2))
def test_bulyan_selects_and_averages_as_the_paper_does(buf, f):
    w_t, bases, updates, parts = buf
    n = len(updates)
    f = min(f, (n - 3) // 4)
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=bulyan", f"algorithm.defense.f={f}", k=4 * f + 3)
    result = run(cfg, w_t, bases, updates, parts)
    vec = deltas_of(bases, updates)
    chosen = oracle_bulyan_selection(vec, f, params_idx(parts, len(vec[0])))
    assert {i for i, d in enumerate(result.info) if not d["rejected"]} == chosen
    assert all(d["reason"] == f"bulyan: not among the {n - 2 * f} of {n} its iterated Krum selects (f={f})"
               for d in result.info if d["rejected"])
    est = oracle_coordinate([vec[i] for i in sorted(chosen)], "bulyan", f=f)
    expected = with_counters(step_of(w_t, est), w_t, [updates[i] for i in chosen], parts)
    assert torch.allclose(result.new_global, torch.tensor(expected), rtol=1e-6, atol=1e-5)


@SETTINGS
@given(buffers(counters=True), buffers(counters=True), st.sampled_from([0.5, 3.0, 100.0]), st.integers(1, 3))
def test_centered_clipping_clips_around_the_last_aggregate_kept_in_the_rules_memory(first, second, tau, iterations):
    """Two aggregations in a row: the second's centre is the first's result, handed on by the rule's memory."""
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=centered_clipping", f"algorithm.defense.tau={tau}",
                 f"algorithm.defense.iterations={iterations}", k=2)
    memory = memory_of(cfg.algorithm)
    w_t, bases, updates, parts = first
    d = w_t.numel()
    if second[0].numel() != d:
        return
    r1 = run(cfg, w_t, bases, updates, parts, memory)
    idx = params_idx(parts, d)
    v1 = oracle_centered_clipping(deltas_of(bases, updates), [0.0] * d, tau, iterations, idx)
    v1 = [0.0 if parts is not None and bool(parts.counters[i]) else x for i, x in enumerate(v1)]
    assert torch.allclose(memory.state["centre"], torch.tensor(v1, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    expected = with_counters(step_of(w_t, v1), w_t, updates, parts)
    assert torch.allclose(r1.new_global, torch.tensor(expected), rtol=1e-6, atol=1e-5)
    w2, bases2, updates2, parts2 = second
    r2 = run(cfg, w2, bases2, updates2, parts, memory)
    v2 = oracle_centered_clipping(deltas_of(bases2, updates2), v1, tau, iterations, idx)
    v2 = [0.0 if parts is not None and bool(parts.counters[i]) else x for i, x in enumerate(v2)]
    assert torch.allclose(memory.state["centre"], torch.tensor(v2, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    assert torch.allclose(r2.new_global, torch.tensor(with_counters(step_of(w2, v2), w2, updates2, parts)),
                          rtol=1e-6, atol=1e-5)


def test_centered_clipping_with_nothing_kept_keeps_its_centre_and_w_t():
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=centered_clipping", k=2)
    memory = memory_of(cfg.algorithm)
    w_t = torch.zeros(2)
    good = [BufferedUpdate(device=0, job=0, n_samples=1, base_version=T, epochs=1, flat=torch.tensor([3.0, 4.0]))]
    run(cfg, w_t, {T: w_t}, good, None, memory)
    centre = memory.state["centre"]
    assert centre.tolist() == [3.0, 4.0]  # ‖Δ − 0‖ = 5 ≤ τ = 10: not clipped
    bad = [BufferedUpdate(device=1, job=1, n_samples=1, base_version=T, epochs=1,
                          flat=torch.tensor([float("inf"), 0.0]))]
    result = run(cfg, w_t, {T: w_t}, bad, None, memory)
    assert torch.equal(result.new_global, w_t) and memory.state["centre"] is centre


# ---- refusals: one line naming the key, its value and the fix; each edge on both sides --------------------------

def refused(*overrides, k=5, m=20):
    with pytest.raises(ConfigError) as err:
        config(*overrides, k=k, m=m)
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("name,f,least", [("krum", 0, 3), ("krum", 1, 5), ("multikrum", 2, 7), ("bulyan", 0, 3),
                                          ("bulyan", 1, 7), ("bulyan", 2, 11)])
def test_a_buffer_below_the_defenses_least_is_refused_with_the_numbers_and_at_the_least_it_runs(name, f, least):
    base = ["algorithm.name=fedbuff", f"algorithm.defense.name={name}", f"algorithm.defense.f={f}"]
    text = refused(*base, k=least - 1)
    assert text.startswith(f"config key 'algorithm.buffer_size' has value {least - 1}; allowed: at least {least} ")
    assert f"f={f}" in text and ("4f + 3" if name == "bulyan" else "2f + 3") in text
    assert config(*base, k=least).algorithm.defense.f == f


@pytest.mark.parametrize("beta,ok", [(-0.01, False), (0.0, True), (0.4999, True), (0.5, False)])
def test_beta_lies_in_zero_to_a_half(beta, ok):
    args = ["algorithm.name=fedbuff", "algorithm.defense.name=trimmed_mean", f"algorithm.defense.beta={beta}"]
    if ok:
        assert config(*args).algorithm.defense.beta == beta
    else:
        assert "'algorithm.defense.beta'" in refused(*args) and "[0, 0.5)" in refused(*args)


@pytest.mark.parametrize("key,bad,good", [("f", -1, 0), ("tau", 0, 1e-9), ("iterations", 0, 1), ("keep", 0, 1)])
def test_each_number_is_bounded_at_its_edge(key, bad, good):
    name = "multikrum" if key in ("f", "keep") else "centered_clipping"
    args = ["algorithm.name=fedbuff", f"algorithm.defense.name={name}"]
    assert f"config key 'algorithm.defense.{key}' has value {bad}" in refused(*args, f"algorithm.defense.{key}={bad}")
    assert getattr(config(*args, f"algorithm.defense.{key}={good}").algorithm.defense, key) == good


def test_multi_krums_keep_is_at_most_k_minus_f_and_only_for_multi_krum():
    args = ["algorithm.name=fedbuff", "algorithm.defense.f=1"]
    assert "at most algorithm.buffer_size − f = 4" in refused(*args, "algorithm.defense.name=multikrum",
                                                            "algorithm.defense.keep=5")
    assert config(*args, "algorithm.defense.name=multikrum", "algorithm.defense.keep=4").algorithm.defense.keep == 4
    assert "null unless algorithm.defense.name=multikrum" in refused(*args, "algorithm.defense.name=krum",
                                                                    "algorithm.defense.keep=1")


@pytest.mark.parametrize("rule", ["seafl", "seafl2", "fedavg", "fedasync", "ca2fl"])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_an_estimator_with_a_rule_that_averages_no_deltas_is_refused(rule, name):
    text = refused(f"algorithm.name={rule}", f"algorithm.defense.name={name}", "algorithm.defense.f=0", k=5, m=5)
    assert text.startswith(f"config key 'algorithm.defense.name' has value '{name}'; allowed: a filter (krum, "
                           f"multikrum, zenopp, asyncfilter) or none with algorithm.name={rule}")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_an_estimator_runs_with_fedbuff_and_fadas(name):
    for rule in ("fedbuff", "fadas"):
        assert config(f"algorithm.name={rule}", f"algorithm.defense.name={name}", "algorithm.defense.f=0",
                      *(["algorithm.defense.server_samples=1"] if name in SERVER_HELD else []))


@pytest.mark.parametrize("name", FILTERS + ESTIMATORS)
def test_each_defense_is_refused_under_dp(name):
    text = refused("algorithm.name=fedbuff", f"algorithm.defense.name={name}", "algorithm.defense.f=0",
                   "privacy.enabled=true", "privacy.noise_multiplier=1.0")
    assert text.startswith(f"config key 'algorithm.defense.name' has value '{name}'; allowed: none with "
                           f"privacy.enabled=true (no sensitivity is derived")


def test_an_estimator_with_the_delta_pseudo_gradient_is_refused():
    text = refused("algorithm.name=fedbuff", "algorithm.defense.name=median", "algorithm.server_opt.name=adam",
                   "algorithm.server_opt.pseudo_gradient=delta")
    assert text.startswith("config key 'algorithm.server_opt.pseudo_gradient' has value 'delta'; allowed: model with "
                           "algorithm.defense.name=median")
    assert config("algorithm.name=fedbuff", "algorithm.defense.name=krum", "algorithm.defense.f=0",
                  "algorithm.server_opt.name=adam", "algorithm.server_opt.pseudo_gradient=delta")


def test_an_unknown_defense_is_refused_naming_the_known_ones():
    text = refused("algorithm.defense.name=krum2")
    assert "'algorithm.defense.name' has value 'krum2'" in text and "centered_clipping" in text
