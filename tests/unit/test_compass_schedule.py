"""FedCompass's schedule (seafl_dist/sim/compass.py) against schedules computed by hand (docs/algorithms.md,
"FedCompass"): the step clock, the speed estimate, joining and creating groups, deadlines, late arrivals."""
import copy
import math

import pytest
from hypothesis import given, settings, strategies as st

from seafl_dist.report.trace import check_trace
from seafl_dist.sim.compass import CompassScheduler, Group, step_ends


def test_a_step_counted_job_spreads_each_epochs_idle_over_its_steps():
    # 10 steps of 4 a pass: passes of 4, 4, 2 steps; b_0 = 5 + 2; the last pass takes half of its epoch's 40 s
    assert step_ends(5.0, 2.0, [10.0, 20.0, 40.0], 4, 10) == [17.0, 37.0, 57.0]
    assert step_ends(0.0, 0.0, [8.0], 4, 1) == [2.0]
    with pytest.raises(ValueError, match="steps >= 1"):
        step_ends(0.0, 0.0, [8.0], 4, 0)


def per_step(sec, slow=None):
    """epoch_times of 10-step epochs: device d's step takes sec[d] seconds, slow[(d, job index)] instead when given."""
    slow = slow or {}
    return lambda d, j, passes: [10 * slow.get((d, j), sec[d])] * passes


def run(sec, slow=None, **kw):
    sched = CompassScheduler(num_devices=len(sec), epoch_times=per_step(sec, slow), steps_per_epoch=[10] * len(sec),
                             **kw)
    return sched, list(sched.events())


def of(events, kind):
    return [e for e in events if e["event"] == kind]


def test_groups_form_from_the_speed_estimates():
    # v = 1, 1.5, 3 s a step; everyone's first job is Q_max = 100 steps and aggregated alone
    _, ev = run([1.0, 1.5, 3.0], max_aggregations=6)
    starts = [(e["time"], e["device"], e["steps"], e["group"]) for e in of(ev, "start")]
    assert starts[:3] == [(0.0, 0, 100, None), (0.0, 1, 100, None), (0.0, 2, 100, None)]
    # t=100: device 0 alone, no group waits: a new group 0 of 100 steps, T = 200, L = 200 + 0.5·100 = 250
    # t=150: device 1 joins group 0 with ⌊(200 − 150)/1.5⌋ = 33 steps
    # t=200: group 0 complete; fastest first: device 0 creates group 1 (T = 300), device 1 joins ⌊100/1.5⌋ = 66
    # t=300: group 1 complete (device 1 at 200 + 66·1.5 = 299); device 2's first job lands: joins group 2 (T = 400)
    #        with ⌊100/3⌋ = 33 steps
    assert starts[3:] == [(100.0, 0, 100, 0), (150.0, 1, 33, 0), (200.0, 0, 100, 1), (200.0, 1, 66, 1),
                          (300.0, 0, 100, 2), (300.0, 1, 66, 2), (300.0, 2, 33, 2),
                          (400.0, 0, 100, 3), (400.0, 1, 66, 3), (400.0, 2, 33, 3)]
    assert [(g["group"], g["expected"], g["deadline"]) for g in of(ev, "group")] == [
        (0, 200.0, 250.0), (1, 300.0, 350.0), (2, 400.0, 450.0), (3, 500.0, 550.0)]
    aggs = [(a["time"], a["trigger"], a["group"], [(u["device"], u["staleness"], u["steps"]) for u in a["updates"]])
            for a in of(ev, "aggregate")]
    assert aggs == [(100.0, "single", None, [(0, 0, 100)]), (150.0, "single", None, [(1, 1, 100)]),
                    (200.0, "arrival", 0, [(1, 0, 33), (0, 1, 100)]), (300.0, "arrival", 1, [(1, 0, 66), (0, 0, 100)]),
                    (300.0, "single", None, [(2, 4, 100)]),
                    (400.0, "arrival", 2, [(1, 1, 66), (2, 0, 33), (0, 1, 100)])]
    job = {e["job"]: e for e in of(ev, "start")}
    assert job[4]["epoch_ends"] == [165.0, 180.0, 195.0, 199.5]  # 33 steps: 3 epochs and 3 steps of 1.5 s


def test_a_missed_deadline_aggregates_without_the_straggler_whose_late_update_waits_in_the_general_buffer():
    # device 1's second job (its job index 1) runs at 6 s a step instead of 1.5
    sched, ev = run([1.0, 1.5], slow={(1, 1): 6.0}, max_aggregations=5)
    # t=150: device 1 joins group 0 (T = 200, L = 250) with 33 steps, but they end at 150 + 33·6 = 348
    # t=250: the deadline: group 0 aggregates device 0's update alone (base version 1, now version 2)
    dl = of(ev, "deadline")
    assert [(d["time"], d["group"]) for d in dl] == [(250.0, 0)]
    late = [f for f in of(ev, "finish") if f["late"]]
    assert [(f["time"], f["device"], f["group"]) for f in late] == [(348.0, 1, 0)]
    # t=348: v_1 = 0.1·1.5 + 0.9·(348 − 150)/33 = 5.55; it cannot join group 1 (T = 350: ⌊2/5.55⌋ = 0 < 20), so it
    # creates group 2 with ⌊(L_1 + v_0·Q_max − 348)/5.55⌋ = ⌊(400 + 100 − 348)/5.55⌋ = 27 steps
    v1 = 0.1 * 1.5 + 0.9 * 6.0
    assert sched.speed[1] == pytest.approx(0.1 * v1 + 0.9 * 1.5)  # after its third job, at 1.5 s a step again
    g2 = of(ev, "group")[2]
    assert g2["group"] == 2 and g2["time"] == 348.0
    assert g2["expected"] == pytest.approx(348 + 27 * v1) and g2["deadline"] == pytest.approx(348 + 27 * v1 * 1.5)
    starts = [(e["time"], e["device"], e["steps"], e["group"]) for e in of(ev, "start")]
    assert starts[4:] == [(250.0, 0, 100, 1), (348.0, 1, 27, 2), (350.0, 0, 100, 3), (388.5, 1, 32, 3)]
    aggs = [(a["time"], a["trigger"], a["group"], [(u["device"], u["staleness"]) for u in a["updates"]])
            for a in of(ev, "aggregate")]
    # t=350: group 1 complete: the general buffer (device 1's late update, base 2) first, then device 0's
    # t=350: device 0 creates group 3 with Q_max (joining group 2 would take ⌊147.85⌋ > 100 steps; creating after
    #        group 2 too: ⌊(572.775 + 555 − 350)/1⌋ > 100, kept by none)
    # t=388.5: device 1 (27 steps of 1.5 s) completes group 2 on time; v_1 = 0.1·5.55 + 0.9·1.5 = 1.905, so it joins
    #          group 3 (T = 450) with ⌊61.5/1.905⌋ = 32 steps
    assert aggs == [(100.0, "single", None, [(0, 0)]), (150.0, "single", None, [(1, 1)]),
                    (250.0, "deadline", 0, [(0, 1)]), (350.0, "arrival", 1, [(1, 1), (0, 0)]),
                    (388.5, "arrival", 2, [(1, 1)])]


def test_a_slow_device_creating_a_group_gets_at_least_q_min():
    _, ev = run([1.0, 4.0], max_aggregations=5, q_min=70)
    starts = [(e["time"], e["device"], e["steps"], e["group"]) for e in of(ev, "start")]
    # device 0 alone forms groups 0, 1, 2 (T = 200, 300, 400); at t=400 it completes group 2 first (lower id) and
    # creates group 3 (T = 500, L = 550); then device 1's first job lands (v_1 = 4): joining group 3 gives
    # ⌊100/4⌋ = 25 < 70; creating: ⌊(550 + 1·100 − 400)/4⌋ = 62 <= Q_max, raised to Q_min = 70
    assert starts == [(0.0, 0, 100, None), (0.0, 1, 100, None), (100.0, 0, 100, 0), (200.0, 0, 100, 1),
                      (300.0, 0, 100, 2), (400.0, 0, 100, 3), (400.0, 1, 70, 4)]
    g4 = of(ev, "group")[-1]
    assert (g4["group"], g4["expected"], g4["deadline"]) == (4, 400 + 70 * 4.0, 400 + 70 * 4.0 * 1.5)


def test_a_deadline_that_no_member_met_aggregates_nothing_and_the_late_update_waits_for_the_next_group():
    # one device at 1 s a step; its second job (group 0: T = 200, L = 250) at 3 s a step ends at 100 + 300 = 400
    _, ev = run([1.0], slow={(0, 1): 3.0}, max_aggregations=2)
    assert [(d["time"], d["group"]) for d in of(ev, "deadline")] == [(250.0, 0)]
    assert [(f["time"], f["job"], f["late"]) for f in of(ev, "finish")] == [(100.0, 0, False), (400.0, 1, True),
                                                                            (500.0, 2, False)]
    # t=400: v = 0.1·1 + 0.9·3 = 2.8, no group waits: group 1 of Q_max, T = 400 + 280, L = 400 + 420; the job itself
    # runs at 1 s a step again and lands at 500, on time: the general buffer's update first, then its own
    assert [(g["group"], g["expected"], g["deadline"]) for g in of(ev, "group")][:2] == [
        (0, 200.0, 250.0), (1, pytest.approx(680.0), pytest.approx(820.0))]
    assert [(a["time"], a["trigger"], a["group"], [u["job"] for u in a["updates"]]) for a in of(ev, "aggregate")] == [
        (100.0, "single", None, [0]), (500.0, "arrival", 1, [1, 2])]


def test_the_stream_is_a_pure_function_of_its_inputs_so_a_replay_reproduces_every_assigned_step():
    """Resume replays the schedule from the config: a fresh scheduler's first events are the longer run's."""
    sec, slow = [1.0, 1.7, 2.9, 0.6], {(2, 1): 9.0, (0, 3): 5.0}
    _, long = run(sec, slow, max_aggregations=30)
    _, short = run(sec, slow, max_aggregations=12)
    assert short == long[:len(short)]
    assert [e["steps"] for e in of(long, "start")][:len(of(short, "start"))] == [e["steps"] for e in of(short, "start")]


@settings(max_examples=40, deadline=None)
@given(sec=st.lists(st.floats(0.05, 5.0), min_size=1, max_size=6),
       slow=st.dictionaries(st.tuples(st.integers(0, 5), st.integers(0, 6)), st.floats(0.05, 20.0), max_size=6),
       q=st.tuples(st.integers(1, 30), st.integers(0, 80)))
def test_every_assigned_count_is_within_bounds_and_every_job_is_aggregated_once(sec, slow, q):
    q_min, q_max = q[0], q[0] + q[1]
    _, ev = run(sec, slow, max_aggregations=25, q_min=q_min, q_max=q_max)
    starts, finished, taken = {}, {}, []
    for e in ev:
        if e["event"] == "start":
            assert q_min <= e["steps"] <= q_max
            assert e["steps"] == q_max or e["group"] is not None
            starts[e["job"]] = e
        elif e["event"] == "finish":
            finished[e["job"]] = e
        elif e["event"] == "aggregate":
            taken += [u["job"] for u in e["updates"]]
            assert all(u["job"] in finished and finished[u["job"]]["time"] <= e["time"] for u in e["updates"])
    assert len(taken) == len(set(taken))
    times = [e["time"] for e in ev]
    assert times == sorted(times)
    for j, f in finished.items():  # a finish lands at the end of its planned last pass (no upload here)
        assert math.isclose(f["time"], starts[j]["epoch_ends"][-1])
    assert checked(ev, q_min=q_min, q_max=q_max) == []  # the trace checker's independent replay agrees


def checked(ev, q_min=20, q_max=100):
    return check_trace(ev, concurrency=0, buffer_size=0, staleness_limit=None, partial=False, upload_s=0.0,
                       compass=dict(q_min=q_min, q_max=q_max, speed_momentum=0.9, latest_time_factor=1.5))


def test_the_trace_checker_names_each_broken_rule_of_a_fedcompass_trace():
    _, ev = run([1.0, 1.5], slow={(1, 1): 6.0}, max_aggregations=5)
    assert checked(ev) == []

    def broken(fix):
        bad = copy.deepcopy(ev)  # a fix may change an event's nested lists (its updates)
        fix(bad)
        return " ".join(checked(bad))
    join = next(i for i, e in enumerate(ev) if e["event"] == "start" and e["time"] == 150.0)
    assert "⌊(T − t)/v⌋ = 33" in broken(lambda b: b[join].update(steps=34))
    late = next(i for i, e in enumerate(ev) if e["event"] == "finish" and e["late"])
    assert "late is False" in broken(lambda b: b[late].update(late=False))
    dl = next(i for i, e in enumerate(ev) if e["event"] == "deadline")
    assert "deadline" in broken(lambda b: b[dl].update(time=249.0))
    agg = next(i for i, e in enumerate(ev) if e["event"] == "aggregate" and e["trigger"] == "arrival")
    assert "due: ('arrival', 1, [3, 4])" in broken(lambda b: b[agg]["updates"].pop(0))
    group = next(i for i, e in enumerate(ev) if e["event"] == "group" and e["group"] == 2)
    assert "not t + Q·v" in broken(lambda b: b[group].update(expected=b[group]["expected"] + 1,
                                                             deadline=b[group]["deadline"] + 1.5))
    first = next(i for i, e in enumerate(ev) if e["event"] == "start")
    assert "first job" in broken(lambda b: b[first].update(steps=99))
    assert "was due before" in broken(lambda b: b.pop(agg))
    assert "is not in flight" in broken(lambda b: b.insert(late + 1, dict(b[late])))  # the same finish twice
    assert "lands at 349.0" in broken(lambda b: b[late].update(time=349.0))
    assert "differ from its start's" in broken(lambda b: b[late].update(steps=b[late]["steps"] + 1))
    assert "outside [20, 100]" in broken(lambda b: b[join].update(steps=19))
    assert broken(lambda b: b[join].update(steps=34)).startswith(f"line {join + 1} (start t=150.0): ")
    assert "group id 5; the next is 2" in broken(lambda b: b[group].update(group=5))
    version = ev[agg]["version"]
    assert broken(lambda b: b.insert(agg + 1, {"event": "eval", "time": b[agg]["time"], "version": version})) == ""
    assert f"evaluates version {version - 1}, the current one is {version}" in broken(
        lambda b: b.insert(agg + 1, {"event": "eval", "time": b[agg]["time"], "version": version - 1}))


def bare(speed):
    sched = CompassScheduler(num_devices=len(speed), epoch_times=per_step([1.0] * len(speed)),
                             steps_per_epoch=[10] * len(speed))
    sched.speed = dict(enumerate(speed))
    return sched


def test_equal_step_counts_join_the_later_group():
    # device 2 (2 s a step) at t = 100: ⌊50.5/2⌋ = ⌊50.9/2⌋ = 25 steps for either group: the reference keeps the later
    sched = bare([1.0, 1.0, 2.0])
    groups = {0: Group(id=0, expected=150.5, deadline=200.0, pending=[0]),
              1: Group(id=1, expected=150.9, deadline=200.0, pending=[1])}
    assert sched.assign(2, 100.0, groups) == (1, 25, None)
    assert groups[1].pending == [1, 2] and groups[0].pending == [0]


def test_a_group_whose_deadline_is_now_is_no_anchor_for_a_new_group():
    # group 0's deadline is t = 100 itself: joining gives ⌊−10/2⌋ < Q_min and creating ignores it, so Q_max
    sched = bare([1.0, 2.0])
    sched._next_group = 1
    gid, steps, new = sched.assign(1, 100.0, {0: Group(id=0, expected=90.0, deadline=100.0, pending=[0])})
    assert (gid, steps) == (1, 100) and (new.expected, new.deadline) == (300.0, 400.0)
    # with the deadline still ahead (t = 99.5) it anchors: ⌊(100 + 1·100 − 99.5)/2⌋ = 50 steps
    gid, steps, _ = sched.assign(1, 99.5, {0: Group(id=0, expected=90.0, deadline=100.0, pending=[0])})
    assert steps == 50


def test_joining_takes_a_group_whose_steps_are_exactly_q_min_or_q_max_and_no_group_a_step_outside():
    # device 1 (2 s a step) at t = 0; group 0's deadline is far (1000), so creating gives no kept q_g: Q_max
    def assign(expected):
        sched = bare([1.0, 2.0])
        sched._next_group = 1
        gid, steps, new = sched.assign(1, 0.0, {0: Group(id=0, expected=expected, deadline=1000.0, pending=[0])})
        return gid, steps, new is None
    assert assign(40.0) == (0, 20, True)  # ⌊40/2⌋ = 20 = Q_min: joins
    assert assign(39.9) == (1, 100, False)  # 19 steps: creates
    assert assign(200.0) == (0, 100, True)  # ⌊200/2⌋ = 100 = Q_max: joins
    assert assign(202.0) == (1, 100, False)  # 101 steps: creates


def test_creating_keeps_a_q_g_of_exactly_q_max_drops_one_above_and_raises_zero_to_q_min():
    # device 2 (2 s a step) at t = 0; no group can be joined (T = 10: 5 steps); device 0 (1 s a step) is each group's
    # fastest member; q_g = ⌊(L_g + 1·100)/2⌋
    def steps(*deadlines, speed=(1.0, 1.0, 2.0)):
        sched = bare(list(speed))
        sched._next_group = len(deadlines)
        groups = {i: Group(id=i, expected=10.0, deadline=d, pending=[0]) for i, d in enumerate(deadlines)}
        return sched.assign(2, 0.0, groups)[1]
    assert steps(100.0, 1.0) == 100  # q_g = 100 (kept) and 50: the largest
    assert steps(102.0, 1.0) == 50  # q_g = 101 is dropped
    assert steps(1.0) == 50
    # q_g = ⌊(0.5 + 100·0.001)/2⌋ = 0: raised to Q_min
    assert steps(0.5, speed=(0.001, 1.0, 2.0)) == 20


def test_a_groups_fastest_member_may_be_one_that_already_arrived():
    # group 0: device 0 (1 s a step) still training, device 3 (0.5 s) arrived; device 1 (2 s a step) at t = 0 cannot
    # join (T = 1) and creates: q_g = ⌊(10 + 0.5·100)/2⌋ = 30, not ⌊(10 + 1·100)/2⌋ = 55
    from types import SimpleNamespace
    sched = bare([1.0, 2.0, 1.0, 0.5])
    sched._next_group = 1
    groups = {0: Group(id=0, expected=1.0, deadline=10.0, pending=[0], arrived=[SimpleNamespace(device=3)])}
    assert sched.assign(1, 0.0, groups)[1] == 30


def test_a_bad_schedule_is_refused_naming_its_values():
    def refused(**kw):
        args = dict(num_devices=2, epoch_times=per_step([1.0, 1.0]), steps_per_epoch=[10, 10], **kw)
        with pytest.raises(ValueError) as err:
            list(CompassScheduler(**args).events())
        return str(err.value)
    assert refused(q_min=30, q_max=20) == "need 1 <= q_min (30) <= q_max (20)"
    assert refused(speed_momentum=1.5) == "need speed_momentum in (0, 1] (1.5) and latest_time_factor >= 1 (1.5)"
    assert refused(latest_time_factor=0.5) == "need speed_momentum in (0, 1] (0.9) and latest_time_factor >= 1 (0.5)"
    with pytest.raises(ValueError, match="steps_per_epoch has 1 entries for 2 devices"):
        CompassScheduler(num_devices=2, epoch_times=per_step([1.0, 1.0]), steps_per_epoch=[10])
    with pytest.raises(ValueError, match="device 0's job of 100 steps takes no virtual time"):
        list(CompassScheduler(num_devices=1, epoch_times=per_step([0.0]), steps_per_epoch=[10]).events())
