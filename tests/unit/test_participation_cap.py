"""Privacy's participation cap in the scheduler (sim/scheduler.py ``max_participation``, issue 42 A.5): a device
with m scheduled inclusions (jobs started minus jobs dropped) is never started again, with and without churn; the
stream then ends with a stall that says so; a cap never reached changes nothing."""
from collections import Counter

import pytest

from seafl_dist.sim import Scheduler

N = 12
SPEEDS = [1.0 + 0.37 * k for k in range(N)]  # distinct epoch times: fast devices would come back first


def plan(device, _index, start):
    return [start + SPEEDS[device]]


def events(**kw):
    kw.setdefault("max_aggregations", 200)
    kw.setdefault("concurrency", 4)
    kw.setdefault("buffer_size", 2)
    return list(Scheduler(num_devices=N, staleness_limit=None, partial=False, plan=plan, n_samples=[10] * N,
                          seed=3, **kw).events())


def inclusions(evs) -> Counter:
    """m_k: the aggregations whose buffer holds device k (once per aggregation)."""
    return Counter(d for e in evs if e["event"] == "aggregate" for d in {u["device"] for u in e["updates"]})


def starts(evs) -> Counter:
    return Counter(e["device"] for e in evs if e["event"] == "start")


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_no_device_is_started_or_included_more_than_the_cap_and_the_end_is_a_stall_that_says_why(cap):
    evs = events(max_participation=cap)
    assert max(inclusions(evs).values()) == cap  # reached: the cap is what stopped the run
    assert max(starts(evs).values()) == cap  # no drops here: a start is a scheduled inclusion
    assert set(starts(evs)) == set(range(N))  # every device took part before the run ran out of devices
    aggregations = sum(e["event"] == "aggregate" for e in evs)
    assert aggregations < 200 and aggregations * 2 <= N * cap
    last = evs[-1]
    assert last["event"] == "stall" and "privacy.max_participation = " + str(cap) in last["reason"]
    assert last["time"] == max(e["time"] for e in evs if e["event"] == "finish")
    assert [e["event"] for e in evs].count("stall") == 1


def test_a_device_one_short_of_the_cap_is_still_started():
    """Retirement at m scheduled inclusions, not before: with cap 2 every device that ran once runs again."""
    evs = events(max_participation=2)
    ran = starts(evs)
    assert all(n == 2 for d, n in ran.items() if d not in last_buffer(evs))


def last_buffer(evs) -> set:
    """Devices whose final job finished into a buffer that never filled (no aggregation after it)."""
    last_agg = max(i for i, e in enumerate(evs) if e["event"] == "aggregate")
    return {e["device"] for e in evs[last_agg + 1:] if e["event"] == "finish"}


def test_a_cap_never_reached_changes_nothing_and_none_is_the_plain_loop():
    plain = events(max_aggregations=30)
    assert events(max_aggregations=30, max_participation=10**6) == plain
    assert max(starts(plain).values()) > 2  # the cap below binds
    capped = events(max_aggregations=30, max_participation=2)
    assert capped != plain


def test_with_dropouts_a_dropped_job_gives_its_slot_back():
    evs = events(max_participation=2, dropout=0.4, max_aggregations=500)
    drops = Counter(e["device"] for e in evs if e["event"] == "drop")
    assert sum(drops.values()) > 0
    assert max(inclusions(evs).values()) == 2
    for d, n in starts(evs).items():
        assert n - drops[d] <= 2  # scheduled inclusions never exceed the cap
    assert any(n > 2 for n in starts(evs).values())  # a drop let its device start again
    assert evs[-1]["event"] == "stall" and "privacy.max_participation = 2 and retired" in evs[-1]["reason"]


@pytest.mark.parametrize("cap", [0, -1])
def test_a_cap_below_one_is_refused(cap):
    with pytest.raises(ValueError, match="max_participation must be >= 1"):
        events(max_participation=cap)


def test_a_drop_below_the_cap_brings_a_retired_device_back_and_no_retirement_says_nothing():
    s = Scheduler(num_devices=N, concurrency=4, buffer_size=2, staleness_limit=None, partial=False, plan=plan,
                  max_participation=2)
    assert s.cap_note() == "" and s.unavailable([3, 1]) == [3, 1]
    s.count(5, +1)
    assert s.retired == set()
    s.count(5, +1)
    assert s.retired == {5} and s.unavailable([7, 1]) == [1, 5, 7]
    assert s.cap_note() == f"; 1 of {N} devices reached privacy.max_participation = 2 and retired"
    s.count(5, -1)
    assert s.retired == set()
