"""AsyncFilter (``algorithm.defense.name: asyncfilter``; seafl_dist/defenses/asyncfilter.py) against an implementation
written here from docs/robustness.md's reading of PLATO's ``async_filter``, on sequences of buffers Hypothesis
generates; its edges (the least group, the record's reach, one and two distinct distances, ties); its refusals.

Oracle, as PLATO's code runs it (a list ``record`` with one entry per aggregation, the staleness-0 group's average
and count, (None, 0) when that group was too small; ``record[-s]`` is the entry of s aggregations back):

- the buffer's updates grouped by staleness s; a group of fewer than ``group_min`` is skipped;
- its average: s = 0, the group's mean m (then recorded); s > 0, (c·record[-s] + |G|·m)/(c + |G|), written back to
  record[-s] with count c + |G| (c = 0 and record[-s] unused when it is empty); s beyond ``history`` (or before the
  first aggregation), the group's mean, not recorded; the record holds w_t's dtype (float32 here);
- r_k = ‖Δ_k − avg‖ over the trainable parameters, divided by their sum; the 3-means of the r_k by trying every
  labelling of the group's positions with 3 clusters (not only contiguous ones), the cluster of the largest mean
  dropped. With one distinct r nothing is dropped, with two the larger ones (docs/robustness.md's choices).
Near-ties (sums of squares within 1e-12) admit every optimal labelling's top cluster.
"""
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from seafl_dist.algo import BufferedUpdate, FlatParts, aggregate, memory_of
from seafl_dist.algo.memory import frozen, to_cpu
from seafl_dist.defenses.asyncfilter import farthest_cluster
from defense_configs import config, refused

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
D = 4  # entries: 2 parameters, a batch-norm statistic, a counter
PARTS = FlatParts(torch.tensor([True, True, False, False]), torch.tensor([False, False, True, False]),
                  torch.tensor([False, False, False, True]))
IDX = [0, 1]


# ---- the oracle ------------------------------------------------------------------------------------------------

def oracle_tops(r):
    """Every top cluster (a frozenset of positions) an optimal 3-means of the 1-D values r may give."""
    n = len(r)
    if len(set(r)) == 1:
        return {frozenset()}
    if len(set(r)) == 2:
        return {frozenset(i for i in range(n) if r[i] == max(r))}
    found = []
    for lab in itertools.product(range(3), repeat=n):
        if len(set(lab)) < 3:
            continue
        clusters = [[r[i] for i in range(n) if lab[i] == c] for c in range(3)]
        means = [sum(c) / len(c) for c in clusters]
        sse = sum((x - mu) ** 2 for c, mu in zip(clusters, means) for x in c)
        top = max(range(3), key=lambda c: means[c])
        found.append((sse, frozenset(i for i in range(n) if lab[i] == top)))
    best = min(s for s, _ in found)
    return {top for s, top in found if s <= best + 1e-12}


def oracle_step(t, deltas, bases, record, group_min, history):
    """{frozenset of positions dropped per group: candidates} as a list of (positions of the group, candidate tops);
    ``record`` (PLATO's list) updated in place and this aggregation's entry appended."""
    groups = {}
    for k, b in enumerate(bases):
        groups.setdefault(t - b, []).append(k)
    current = (None, 0)
    out = []
    for s in sorted(groups):
        members = groups[s]
        if len(members) < group_min:
            continue
        x = np.array([deltas[k] for k in members], dtype=np.float64)
        n = len(members)
        m = x.sum(axis=0) / n
        if s == 0:
            avg = m
            current = (m.astype(np.float32), n)
        elif s <= history and s <= len(record):
            mean, c = record[-s]
            avg = m if mean is None else (mean.astype(np.float64) * c + m * n) / (c + n)
            record[-s] = (avg.astype(np.float32), c + n)
        else:
            avg = m
        dist = [math.sqrt(sum((row[i] - avg[i]) ** 2 for i in IDX)) for row in x]
        total = sum(dist)
        tops = {frozenset()} if total == 0 else oracle_tops([r / total for r in dist])
        out.append((members, {frozenset(members[j] for j in top) for top in tops}))
    record.append(current)
    return out


# ---- buffers ---------------------------------------------------------------------------------------------------

@st.composite
def runs(draw):
    """A few aggregations at versions 0, 1, …: each a buffer of updates (base version, whole-number delta)."""
    steps = []
    for t in range(draw(st.integers(2, 4))):
        n = draw(st.integers(4, 9))
        bases = [draw(st.sampled_from(sorted({t, max(0, t - 1), max(0, t - 2)}))) for _ in range(n)]
        deltas = [[float(draw(st.integers(-6, 6))) for _ in range(2)] + [float(draw(st.integers(-3, 3))),
                                                                         float(draw(st.integers(1, 3)))]
                  for _ in range(n)]
        steps.append((bases, deltas))
    models = {v: [float(draw(st.integers(-20, 20))) for _ in range(D - 1)] + [float(10 + v)]
              for v in range(len(steps))}
    return steps, models


def updates_of(t, bases, deltas, models):
    return [BufferedUpdate(device=k, job=100 * t + k, n_samples=k + 1, base_version=b, epochs=1,
                           flat=torch.tensor([w + x for w, x in zip(models[b], delta)]))
            for k, (b, delta) in enumerate(zip(bases, deltas))]


@SETTINGS
@given(runs(), st.sampled_from([3, 4]), st.sampled_from([0, 1, 2, 19]), st.sampled_from(["fedbuff", "seafl",
                                                                                             "fedavg"]))
def test_asyncfilter_drops_what_plato_drops_over_a_run_and_the_rule_weights_the_rest(run, group_min, history, rule):
    steps, models = run
    record = []
    memory = None
    for t, (bases, deltas) in enumerate(steps):
        n = len(bases)
        cfg = config(f"algorithm.name={rule}", "algorithm.defense.name=asyncfilter",
                     f"algorithm.defense.group_min={group_min}", f"algorithm.defense.history={history}", k=n, m=n)
        memory = memory if memory is not None else memory_of(cfg.algorithm)
        ups = updates_of(t, bases, deltas, models)
        w_t = torch.tensor(models[t])
        result = aggregate(cfg.algorithm, t, w_t, ups, lambda v: torch.tensor(models[v]), PARTS, memory=memory)
        dropped = {i for i, d in enumerate(result.info) if d["rejected"]}
        expected = oracle_step(t, deltas, bases, record, group_min, history)
        screened = set()
        for members, candidates in expected:
            assert frozenset(dropped & set(members)) in candidates, (t, members, candidates, result.info)
            screened |= set(members)
        assert not dropped - screened  # a group below group_min passes whole
        assert all(result.info[i]["reason"].startswith("asyncfilter: distance share ") and
                   result.info[i]["weight"] == 0.0 for i in dropped)
        kept = [u for i, u in enumerate(ups) if i not in dropped]
        plain = config(f"algorithm.name={rule}", k=n, m=n)
        alone = aggregate(plain.algorithm, t, w_t, kept, lambda v: torch.tensor(models[v]), PARTS)
        assert torch.equal(result.new_global, alone.new_global)
        # the record: the entries PLATO's list holds that a later group may still read, in w_t's dtype
        got = memory.defense_state["record"]
        want = {t - j: e for j, e in enumerate(reversed(record)) if e[0] is not None and j + 1 <= history}
        assert sorted(got) == sorted(want)
        for b, (mean, c) in want.items():
            assert got[b]["count"] == c and got[b]["mean"].dtype == torch.float32
            assert np.array_equal(got[b]["mean"].numpy(), mean)
        memory.defense_state = frozen(to_cpu("algorithm.defense", memory.defense_state))  # as a checkpoint holds it


# ---- the clustering and its edges ------------------------------------------------------------------------------

@SETTINGS
@given(st.lists(st.integers(0, 12), min_size=3, max_size=7))
def test_the_farthest_cluster_is_an_optimal_3_means_top_cluster(values):
    r = [v / 7 for v in values]
    assert frozenset(farthest_cluster(r)) in oracle_tops(r)


def test_one_distinct_distance_drops_nothing_two_drop_the_larger_and_ties_go_to_the_smaller_top():
    assert farthest_cluster([0.25] * 4) == []
    assert farthest_cluster([0.2, 0.2, 0.6]) == [2] and farthest_cluster([0.2, 0.4, 0.4]) == [1, 2]
    # {1}{2}{3,4}, {1}{2,3}{4} and {1,2}{3}{4} all leave 0.5: the top of one value, then the middle of one
    assert farthest_cluster([4.0, 1.0, 3.0, 2.0]) == [0]
    assert farthest_cluster([1.0, 1.0, 2.0, 9.0, 9.5]) == [3, 4]


def one(t, base, delta, k=0):
    return BufferedUpdate(device=k, job=k, n_samples=1, base_version=base, epochs=1,
                          flat=torch.tensor([float(x) for x in delta]))


def at(t, ups, cfg, memory):
    return aggregate(cfg.algorithm, t, torch.zeros(2), ups, lambda v: torch.zeros(2), None, memory=memory)


@pytest.mark.parametrize("group_min", [3, 4])
def test_a_group_below_group_min_passes_and_at_group_min_it_is_screened(group_min):
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=asyncfilter",
                 f"algorithm.defense.group_min={group_min}", k=group_min)
    far = [[1, 0], [1, 1], [0, 1], [2, 2]][:group_min - 1] + [[40, 40]]
    below = at(5, [one(5, 5, d, k) for k, d in enumerate(far[1:])], cfg, memory_of(cfg.algorithm))
    assert not any(d["rejected"] for d in below.info)
    screened = at(5, [one(5, 5, d, k) for k, d in enumerate(far)], cfg, memory_of(cfg.algorithm))
    assert [d["rejected"] for d in screened.info] == [False] * (group_min - 1) + [True]
    assert "of the %d updates at staleness 0" % group_min in screened.info[-1]["reason"]


def test_four_updates_equally_far_from_their_mean_are_all_kept():
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=asyncfilter", k=4)
    result = at(5, [one(5, 5, d, k) for k, d in enumerate([[1, 0], [-1, 0], [0, 1], [0, -1]])], cfg,
                memory_of(cfg.algorithm))
    assert not any(d["rejected"] for d in result.info)


@pytest.mark.parametrize("history", [1, 2])
def test_a_group_reads_its_bases_record_up_to_history_versions_back_and_no_further(history):
    """Version 0: three updates from base 0 recorded (count 3). Version 2: three updates from base 0, staleness 2:
    with history 2 they are compared with the record's average (count 6 after), with history 1 with their own mean,
    and base 0 has left the record."""
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=asyncfilter",
                 f"algorithm.defense.history={history}", k=3)
    memory = memory_of(cfg.algorithm)
    at(0, [one(0, 0, d, k) for k, d in enumerate([[10, 0], [11, 0], [12, 0]])], cfg, memory)
    assert memory.defense_state["record"][0]["count"] == 3
    at(1, [one(1, 1, [0, 1]), one(1, 1, [0, 2], 1)], cfg, memory)  # a group of 2: nothing screened or recorded
    assert sorted(memory.defense_state["record"]) == ([0] if history == 2 else [])
    # around their own mean (0, 1) the three are at 1, 0, 1 (two distinct: the two at 1 dropped); around the
    # record's ((11, 0)·3 + (0, 1)·3)/6 = (5.5, 0.5) three distinct distances, the first the farthest
    result = at(2, [one(2, 0, d, k) for k, d in enumerate([[-1, 1], [0, 1], [1, 1]])], cfg, memory)
    state = memory.defense_state["record"]
    if history == 2:
        assert 0 not in state  # read at staleness 2, then out of the next aggregation's reach
        dist = [math.hypot(x - 5.5, 0.5) for x in (-1, 0, 1)]
        assert [d["rejected"] for d in result.info] == [r == max(dist) for r in dist]
    else:
        assert [d["rejected"] for d in result.info] == [True, False, True]
        assert 0 not in state


def test_a_staleness_1_group_joins_its_bases_record_weighted_by_counts():
    cfg = config("algorithm.name=fedbuff", "algorithm.defense.name=asyncfilter", "algorithm.defense.history=2", k=3)
    memory = memory_of(cfg.algorithm)
    at(0, [one(0, 0, d, k) for k, d in enumerate([[3, 0], [3, 3], [0, 3]])], cfg, memory)  # mean (2, 2), 3
    at(1, [one(1, 0, d, k) for k, d in enumerate([[0, 0], [1, 0], [0, 1], [5, 5]])], cfg, memory)  # (1.5, 1.5), 4
    entry = memory.defense_state["record"][0]
    assert entry["count"] == 7 and torch.equal(entry["mean"], torch.tensor([(6 + 6) / 7, (6 + 6) / 7]))


# ---- refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_min", [3, 5])
def test_a_buffer_below_group_min_is_refused_with_the_numbers_and_at_it_runs(group_min):
    base = ["algorithm.name=seafl", "algorithm.defense.name=asyncfilter", f"algorithm.defense.group_min={group_min}"]
    text = refused(*base, k=group_min - 1)
    assert text.startswith(f"config key 'algorithm.buffer_size' has value {group_min - 1}; allowed: at least "
                           f"algorithm.defense.group_min = {group_min}")
    assert config(*base, k=group_min).algorithm.defense.group_min == group_min
    assert "'algorithm.buffer_size' has value 1" in refused("algorithm.name=fedasync", "algorithm.defense.name="
                                                            "asyncfilter", k=1)


def test_its_keys_are_refused_out_of_domain_and_taken_at_each_edge():
    on = ["algorithm.name=fedbuff", "algorithm.defense.name=asyncfilter"]
    assert "'algorithm.defense.group_min' has value 2" in refused(*on, "algorithm.defense.group_min=2")
    assert "'algorithm.defense.history' has value -1" in refused(*on, "algorithm.defense.history=-1")
    d = config(*on, "algorithm.defense.group_min=3", "algorithm.defense.history=0").algorithm.defense
    assert (d.group_min, d.history, d.kind) == (3, 0, "filter")
    assert "'algorithm.defense.name' has value 'asyncfilter'" in refused(*on, "privacy.enabled=true",
                                                                        "privacy.noise_multiplier=1")
    defaults = config(*on).algorithm.defense
    assert (defaults.group_min, defaults.history) == (3, 19)  # PLATO's len(weights) >= 3 and its 20 groups
