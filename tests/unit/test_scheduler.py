"""The server loop on injected, fixed durations (SPEC "The server loop")."""
import pytest

from seafl_dist.settings import ClockConfig, IdleConfig
from seafl_dist.report.trace import check_trace
from seafl_dist.sim import Lookahead, Scheduler, SpeedModel


def fixed_plan(epoch_s, epochs=5, download=0.0):
    """Device d's epoch lasts epoch_s[d] seconds, always."""
    def plan(device, _job_index, start):
        b = start + download
        ends = []
        for _ in range(epochs):
            b += epoch_s[device]
            ends.append(b)
        return ends
    return plan


def run(**kw):
    defaults = dict(seed=0, max_aggregations=30)
    defaults.update(kw)
    return list(Scheduler(**defaults).events())


def replay_invariants(events, *, M, K, beta, partial=False):
    """Check the SPEC invariants on a trace (seafl_dist.report.trace); returns the aggregate events."""
    problems = check_trace(events, concurrency=M, buffer_size=K, staleness_limit=beta, partial=partial,
                           schedule_only=True)
    assert not problems, "\n".join(problems)
    return [ev for ev in events if ev["event"] == "aggregate"]


def test_beta_blocking_waits_for_the_straggler_and_bounds_staleness():
    # 6 devices, device 5 is 50x slower; K=2, M=4, beta=2.
    epoch_s = [1, 1, 1, 1, 1, 50]
    ev = run(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=2, partial=False,
             plan=fixed_plan(epoch_s), max_aggregations=12)
    aggs = replay_invariants(ev, M=4, K=2, beta=2)
    stalenesses = [u["staleness"] for a in aggs for u in a["updates"]]
    assert max(stalenesses) == 2  # the straggler was waited for at exactly beta
    slow = [u for a in aggs for u in a["updates"] if u["device"] == 5]
    assert slow and all(u["staleness"] == 2 for u in slow)


def test_without_limit_the_straggler_gets_stale():
    epoch_s = [1, 1, 1, 1, 1, 10]
    ev = run(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=None, partial=False,
             plan=fixed_plan(epoch_s), max_aggregations=80)
    aggs = replay_invariants(ev, M=4, K=2, beta=None)
    assert max(u["staleness"] for a in aggs for u in a["updates"]) > 2
    assert all(len(a["updates"]) == 2 for a in aggs)  # no blocking: exactly K each time


def test_concurrency_is_exactly_m_after_every_aggregation():
    speed = SpeedModel(ClockConfig(idle=IdleConfig(distribution="pareto", max=30)), [50] * 40, seed=3, epochs=3)
    ev = run(num_devices=40, concurrency=10, buffer_size=3, staleness_limit=4, partial=True, plan=speed.plan,
             max_aggregations=50, seed=3)
    replay_invariants(ev, M=10, K=3, beta=4, partial=True)
    starts = [e for e in ev if e["event"] == "start"]
    assert sum(1 for e in starts if e["time"] == 0.0) == 10
    # after each aggregation's start events, exactly M are in flight
    in_flight = set()
    for i, e in enumerate(ev):
        if e["event"] == "start":
            in_flight.add(e["job"])
        elif e["event"] == "finish":
            in_flight.discard(e["job"])
        nxt = ev[i + 1]["event"] if i + 1 < len(ev) else None
        if e["event"] == "start" and nxt != "start":
            assert len(in_flight) == 10


def test_seafl2_notified_job_finishes_at_end_of_epoch_in_progress():
    # device 3 is slow: epochs of 10 s, others 1 s; 5 epochs each. K=2, M=4, beta=1.
    epoch_s = [1, 1, 1, 10, 1, 1]
    ev = run(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=1, partial=True,
             plan=fixed_plan(epoch_s), max_aggregations=10)
    notes = [e for e in ev if e["event"] == "notify"]
    assert notes, "a blocked aggregation must notify the straggler"
    starts = {e["job"]: e for e in ev if e["event"] == "start"}
    finishes = {e["job"]: e for e in ev if e["event"] == "finish"}
    cut = 0
    for n in notes:
        ends = starts[n["job"]]["epoch_ends"]
        tau = n["time"]
        # notified at the very time its last epoch ends (a tie with the finish that blocked): keeps its finish
        e = next((i for i, b in enumerate(ends, 1) if tau < b), len(ends))
        assert finishes[n["job"]]["time"] == ends[e - 1]
        assert finishes[n["job"]]["epochs"] == e
        cut += e < 5
    assert cut, "some notified job must upload before its last epoch"
    replay_invariants(ev, M=4, K=2, beta=1, partial=True)


def test_seafl2_is_faster_than_seafl_on_the_same_schedule():
    epoch_s = [1, 1, 1, 10, 1, 1]
    kw = dict(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=1, plan=fixed_plan(epoch_s),
              max_aggregations=10)
    t_plain = [e for e in run(partial=False, **kw) if e["event"] == "aggregate"][-1]["time"]
    t_partial = [e for e in run(partial=True, **kw) if e["event"] == "aggregate"][-1]["time"]
    assert t_partial < t_plain


def test_fedavg_gives_synchronous_rounds():
    epoch_s = [1, 2, 3, 4, 5, 6, 7, 8]
    ev = run(num_devices=8, concurrency=4, buffer_size=4, staleness_limit=0, partial=False,
             plan=fixed_plan(epoch_s, epochs=1), max_aggregations=6)
    aggs = replay_invariants(ev, M=4, K=4, beta=0)
    for a in aggs:
        assert len(a["updates"]) == 4 and all(u["staleness"] == 0 for u in a["updates"])
    # each round starts all M together at the previous aggregation time, and ends at the slowest
    starts = [e for e in ev if e["event"] == "start"]
    prev = 0.0
    for a in aggs:
        round_starts = [s for s in starts if s["version"] == a["version"] - 1]
        assert len(round_starts) == 4 and {s["time"] for s in round_starts} == {prev}
        assert a["time"] == max(s["epoch_ends"][-1] for s in round_starts)
        prev = a["time"]


def test_ties_broken_by_device_id():
    ev = run(num_devices=5, concurrency=5, buffer_size=1, staleness_limit=None, partial=False,
             plan=fixed_plan([2, 2, 2, 2, 2], epochs=1), max_aggregations=5)
    finishes = [e["device"] for e in ev if e["event"] == "finish"][:5]
    assert finishes == [0, 1, 2, 3, 4]


def test_stop_conditions():
    kw = dict(num_devices=6, concurrency=3, buffer_size=1, staleness_limit=None, partial=False,
              plan=fixed_plan([1, 2, 3, 4, 5, 6], epochs=1))
    assert sum(e["event"] == "aggregate" for e in run(max_aggregations=7, **kw)) == 7
    ev = run(max_aggregations=None, max_time=9.5, **kw)
    assert ev and all(e["time"] <= 9.5 for e in ev)
    assert max(e["time"] for e in ev) > 8


def test_same_seed_same_trace_other_seed_other_trace():
    speed = lambda seed: SpeedModel(ClockConfig(), [30] * 20, seed=seed, epochs=2)
    kw = dict(num_devices=20, concurrency=5, buffer_size=2, staleness_limit=3, partial=True, max_aggregations=20)
    a = run(plan=speed(1).plan, seed=1, **kw)
    assert a == run(plan=speed(1).plan, seed=1, **kw)
    assert a != run(plan=speed(2).plan, seed=2, **kw)


def test_lookahead_reports_final_epochs_without_changing_iteration():
    epoch_s = [1, 1, 1, 10, 1, 1]
    kw = dict(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=1, partial=True,
              plan=fixed_plan(epoch_s), max_aggregations=10)
    plain = run(**kw)
    look = Lookahead(Scheduler(seed=0, **kw).events())
    seen = []
    final = {}
    for e in look:
        seen.append(e)
        if e["event"] == "start":
            final[e["job"]] = look.final_epochs(e["job"])
    assert seen == plain
    agg_epochs = {u["job"]: u["epochs"] for e in plain if e["event"] == "aggregate" for u in e["updates"]}
    for job, epochs in final.items():
        assert epochs == agg_epochs.get(job)
    assert any(v is not None and v < 5 for v in final.values())


def test_invalid_sizes_rejected():
    with pytest.raises(ValueError, match="K"):
        Scheduler(num_devices=3, concurrency=2, buffer_size=3, staleness_limit=1, partial=False,
                  plan=fixed_plan([1, 1, 1]))
