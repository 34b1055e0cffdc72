"""Properties, with Hypothesis (issue 51), of the splits and the schedule: a partition places every sample exactly
once and is a function of its seed; groups of str, int and tuple keys come in the documented order (by ``str``
name); the held-out split is disjoint from training, exactly sized and stratified by the key it declares; the
scheduler keeps the concurrency M, the staleness limit β and the participation cap m, and its clock never runs back.
Every expectation is counted here from the documented rule; the profile is tests/conftest.py's ``seafl``."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seafl_dist.data.holdout import split_holdout
from seafl_dist.data.labels import sample_groups
from seafl_dist.data.natural import natural_partition
from seafl_dist.data.partition import partition
from seafl_dist.sim import Scheduler


# ---- partitions ------------------------------------------------------------------------------------------------

@st.composite
def label_sets(draw):
    n = draw(st.integers(2, 120))
    return np.asarray(draw(st.lists(st.integers(0, draw(st.integers(0, 9))), min_size=n, max_size=n)), dtype=np.int64)


@given(label_sets(), st.data(), st.sampled_from(["iid", "dirichlet"]), st.floats(0.05, 5), st.integers(0, 2 ** 32 - 1))
def test_a_partition_places_every_sample_once_and_is_its_seeds_function(labels, data, method, alpha, seed):
    n_dev = data.draw(st.integers(1, len(labels)))
    shards = partition(labels, n_dev, method=method, concentration=alpha, seed=seed)
    assert len(shards) == n_dev and all(len(s) >= 1 for s in shards)
    flat = np.concatenate(shards)
    assert sorted(flat.tolist()) == list(range(len(labels)))  # every sample exactly once
    assert all(s.dtype == np.int64 and (np.diff(s) > 0).all() for s in shards)  # sorted, no repeat
    if method == "iid":  # near-equal parts
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
    again = partition(labels, n_dev, method=method, concentration=alpha, seed=seed)
    assert all(np.array_equal(a, b) for a, b in zip(shards, again))


@given(label_sets(), st.data(), st.sampled_from(["iid", "dirichlet"]), st.integers(0, 2 ** 32 - 1))
def test_a_partition_of_n_samples_a_device_gives_each_exactly_n_and_none_twice(labels, data, method, seed):
    n_dev = data.draw(st.integers(1, len(labels)))
    per = data.draw(st.integers(1, len(labels) // n_dev))
    shards = partition(labels, n_dev, method=method, concentration=0.5, samples_per_device=per, seed=seed)
    assert [len(s) for s in shards] == [per] * n_dev
    flat = np.concatenate(shards)
    assert len(set(flat.tolist())) == len(flat) and flat.min() >= 0 and flat.max() < len(labels)


class Keyed:
    name = "keyed"

    def __init__(self, values):
        self.values = values

    def field(self, key):
        return self.values


KEYS = st.one_of(
    st.lists(st.text("abcé ", max_size=3), min_size=1, max_size=30),
    st.lists(st.integers(-20, 1000), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["a", "b"])), min_size=1, max_size=30),
)


@given(KEYS, st.integers(0, 2 ** 32 - 1))
def test_groups_are_ordered_by_str_name_and_a_natural_split_takes_each_sample_once(values, seed):
    g = sample_groups(Keyed(values), "k")
    names = sorted({str(v) for v in values})  # the documented order: by name, whatever the key's type
    assert g.names == names
    for i, name in enumerate(names):
        assert g.rows(i).tolist() == [r for r, v in enumerate(values) if str(v) == name]  # ascending rows
    shards, taken = natural_partition(g, None, seed, "keyed", key="k")
    assert sorted(taken) == names
    assert sorted(np.concatenate(shards).tolist()) == list(range(len(values)))
    for shard, name in zip(shards, taken):
        assert {str(values[r]) for r in shard} == {name}
    first, _ = natural_partition(g, 1, seed, "keyed", key="k")  # N devices: the first N of the same order
    assert np.array_equal(first[0], shards[0])


# ---- the held-out split ----------------------------------------------------------------------------------------

@st.composite
def devices_and_labels(draw):
    sizes = draw(st.lists(st.integers(2, 30), min_size=1, max_size=6))
    total = sum(sizes)
    labels = np.asarray(draw(st.lists(st.integers(0, 3), min_size=total, max_size=total)), dtype=np.int64)
    perm = np.random.default_rng(draw(st.integers(0, 1000))).permutation(total)
    ends = np.cumsum(sizes)
    return [np.sort(perm[a:b]) for a, b in zip(np.r_[0, ends[:-1]], ends)], labels


@given(devices_and_labels(), st.floats(0.01, 0.5), st.integers(0, 2 ** 32 - 1), st.booleans())
def test_held_out_rows_are_disjoint_exactly_sized_and_stratified_by_the_key(split, f, seed, stratify):
    shards, labels = split
    train, held = split_holdout(shards, f, seed, labels=labels if stratify else None)
    for s, t, h in zip(shards, train, held):
        n, want = len(s), math.floor(f * len(s) + 0.5)
        assert len(h) == want and len(t) == n - want
        assert not set(t.tolist()) & set(h.tolist()) and sorted(t.tolist() + h.tolist()) == s.tolist()
        assert (np.diff(t) > 0).all() and (np.diff(h) > 0).all()
        if stratify:  # a label with g of the device's n samples gets ⌊g·h/n⌋ or ⌈g·h/n⌉ held out
            for c in set(labels[s].tolist()):
                g, got = int((labels[s] == c).sum()), int((labels[h] == c).sum())
                assert math.floor(g * want / n) <= got <= math.ceil(g * want / n), (c, g, got)
    again = split_holdout(shards, f, seed, labels=labels if stratify else None)
    assert all(np.array_equal(a, b) for a, b in zip(held, again[1]))


# ---- the scheduler ---------------------------------------------------------------------------------------------

@st.composite
def schedules(draw):
    n = draw(st.integers(2, 10))
    m = draw(st.integers(1, n))
    k = draw(st.integers(1, m))
    epoch_s = draw(st.lists(st.floats(0.1, 20, allow_nan=False), min_size=n, max_size=n))
    return dict(num_devices=n, concurrency=m, buffer_size=k,
                staleness_limit=draw(st.one_of(st.none(), st.integers(0, 4))), partial=draw(st.booleans()),
                max_participation=draw(st.one_of(st.none(), st.integers(1, 4))), upload_s=draw(st.floats(0, 2)),
                seed=draw(st.integers(0, 1000)), max_aggregations=draw(st.integers(1, 25)),
                plan=lambda d, _i, start, e=epoch_s: [start + e[d] * (j + 1) for j in range(3)])


@settings(max_examples=60)
@given(schedules())
def test_the_schedule_keeps_m_beta_and_the_cap_and_its_clock_never_runs_back(kw):
    events = list(Scheduler(**kw).events())
    times = [e["time"] for e in events]
    assert all(a <= b for a, b in zip(times, times[1:]))  # the virtual clock is monotonic
    flying, started, aggs = set(), {}, 0
    for e in events:
        if e["event"] == "start":
            assert e["device"] not in flying  # a device runs one job at a time
            flying.add(e["device"])
            started[e["device"]] = started.get(e["device"], 0) + 1
            assert len(flying) <= kw["concurrency"]
            if kw["max_participation"] is not None:  # no drops without churn: every start is an inclusion
                assert started[e["device"]] <= kw["max_participation"]
        elif e["event"] == "finish":
            flying.discard(e["device"])
        elif e["event"] == "aggregate":
            aggs += 1
            assert e["version"] == aggs and len(e["updates"]) >= kw["buffer_size"]
            for u in e["updates"]:
                assert u["staleness"] == aggs - 1 - u["base_version"] >= 0
                if kw["staleness_limit"] is not None:
                    assert u["staleness"] <= kw["staleness_limit"]
    assert aggs <= kw["max_aggregations"]
    if kw["max_participation"] is None:
        assert aggs == kw["max_aggregations"]  # nothing retires: the run ends at its cap of aggregations
