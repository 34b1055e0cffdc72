"""The server loop with availability windows and dropouts (sim/churn.py), on hand-worked schedules."""
import math

import pytest

from seafl_dist.report.trace import check_trace
from seafl_dist.sim import Lookahead, Scheduler, stream
from seafl_dist.sim.population import Population
from seafl_dist.sim.profiles import read_profiles

HEADER = "id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows\n"


def population(tmp_path, windows, period="", seed=0):
    """Device k online in ``windows[k]`` ('always' or 'on:off ...'): the rows are written in the
    order the seeded permutation hands them out, so device k gets row k's windows."""
    n = len(windows)
    perm = list(stream(seed, "profiles").permutation(n))
    rows = [None] * n
    for k in range(n):
        rows[perm[k]] = f"d{k},0.01,1,1,{period},{windows[k]}\n"
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "".join(rows))
    pop = Population(read_profiles(path), n, seed)
    assert [pop.profile_of(k) for k in range(n)] == perm
    return pop


def fixed_plan(epoch_s, epochs):
    def plan(device, _index, start):
        return [start + epoch_s[device] * (e + 1) for e in range(epochs)]
    return plan


def run(epoch_s, epochs=1, **kw):
    kw.setdefault("max_aggregations", 2)
    n = len(epoch_s)
    return list(Scheduler(num_devices=n, plan=fixed_plan(epoch_s, epochs), n_samples=[10] * n, **kw).events())


def brief(events):
    """(event, time, device, job) of each event; aggregates as (aggregate, time, version, jobs)."""
    out = []
    for e in events:
        if e["event"] == "aggregate":
            out.append(("aggregate", e["time"], e["version"], [u["job"] for u in e["updates"]]))
        elif e["event"] == "stall":
            out.append(("stall", e["time"]))
        else:
            out.append((e["event"], e["time"], e["device"], e["job"]))
    return out


def checked(events, pop=None, **kw):
    problems = check_trace(events, schedule_only=True, population=pop, **kw)
    assert not problems, "\n".join(problems)
    return events


def test_window_close_drops_the_job_and_an_online_device_takes_the_slot(tmp_path):
    pop = population(tmp_path, ["0:10", "5:100"])  # device 1 is offline at time 0
    ev = run([4, 1], epochs=3, concurrency=1, buffer_size=1, staleness_limit=None, partial=False,
             availability=pop)
    assert brief(ev) == [
        ("start", 0.0, 0, 0),
        ("drop", 10.0, 0, 0),  # its upload would land at 12, after its window closes at 10
        ("start", 10.0, 1, 1),
        ("finish", 13.0, 1, 1), ("aggregate", 13.0, 1, [1]), ("start", 13.0, 1, 2),
        ("finish", 16.0, 1, 2), ("aggregate", 16.0, 2, [2]), ("start", 16.0, 1, 3)]
    assert ev[1]["cause"] == "offline" and ev[2]["version"] == 0
    assert ev[0]["download_s"] == 0.0 and ev[0]["upload_s"] == 0.0
    checked(ev, pop, concurrency=1, buffer_size=1, staleness_limit=None, partial=False, num_devices=2)


def test_a_waiting_slot_is_filled_when_a_device_comes_online(tmp_path):
    pop = population(tmp_path, ["always", "5:100"])
    ev = run([1, 1], epochs=3, concurrency=2, buffer_size=1, staleness_limit=None, partial=False,
             availability=pop, max_aggregations=1)
    assert brief(ev) == [
        ("start", 0.0, 0, 0),  # one slot waits: device 1 is offline
        ("finish", 3.0, 0, 0), ("aggregate", 3.0, 1, [0]), ("start", 3.0, 0, 1)]
    ev = run([1, 1], epochs=3, concurrency=2, buffer_size=1, staleness_limit=None, partial=False,
             availability=pop, max_aggregations=2)
    assert ("start", 5.0, 1, 2) in brief(ev)  # device 1 starts the instant it comes online, from w_1
    assert next(e for e in ev if e["event"] == "start" and e["job"] == 2)["version"] == 1
    checked(ev, pop, concurrency=2, buffer_size=1, staleness_limit=None, partial=False, num_devices=2)


def test_an_upload_landing_exactly_at_the_close_counts(tmp_path):
    pop = population(tmp_path, ["0:3"], period=10)
    ev = run([1], epochs=3, concurrency=1, buffer_size=1, staleness_limit=None, partial=False, availability=pop)
    assert brief(ev) == [("start", 0.0, 0, 0), ("finish", 3.0, 0, 0), ("aggregate", 3.0, 1, [0]),
                         ("start", 10.0, 0, 1),  # offline at 3: the slot waits for the next period
                         ("finish", 13.0, 0, 1), ("aggregate", 13.0, 2, [1])]  # the stream ends at max_aggregations
    checked(ev, pop, concurrency=1, buffer_size=1, staleness_limit=None, partial=False, num_devices=1)


def test_the_last_blocker_dropping_releases_the_aggregation_at_the_drop_time(tmp_path):
    pop = population(tmp_path, ["always", "always", "0:5"])
    kw = dict(concurrency=3, buffer_size=2, staleness_limit=1, availability=pop)
    ev = run([1, 1, 10], partial=False, **kw)
    assert brief(ev)[:9] == [
        ("start", 0.0, 0, 0), ("start", 0.0, 1, 1), ("start", 0.0, 2, 2),
        ("finish", 1.0, 0, 0), ("finish", 1.0, 1, 1), ("aggregate", 1.0, 1, [0, 1]),
        ("start", 1.0, 0, 3), ("start", 1.0, 1, 4),
        ("finish", 2.0, 0, 3)]
    # at 2 the buffer holds K = 2 but device 2 (t_k = 0) blocks at version 1; it drops at 5
    assert brief(ev)[9:] == [("finish", 2.0, 1, 4), ("drop", 5.0, 2, 2), ("aggregate", 5.0, 2, [3, 4]),
                             ("start", 5.0, 0, 5), ("start", 5.0, 1, 6)]  # device 2 is offline for good
    checked(ev, pop, partial=False, num_devices=3, **{k: v for k, v in kw.items() if k != "availability"})


def test_a_notified_job_that_finishes_before_its_drop_point_lands(tmp_path):
    pop = population(tmp_path, ["always", "always", "0:9"])
    kw = dict(epochs=3, concurrency=3, buffer_size=2, staleness_limit=1, availability=pop)
    plain = brief(run([0.25, 0.25, 4], partial=False, **kw))
    assert ("drop", 9.0, 2, 2) in plain  # epochs end at 4, 8, 12: the window closes at 9
    ev = run([0.25, 0.25, 4], partial=True, **kw)
    assert ("notify", 1.5, 2, 2) in brief(ev) and ("finish", 4.0, 2, 2) in brief(ev)  # uploads after epoch 1
    assert not any(e["event"] == "drop" for e in ev)
    checked(ev, pop, partial=True, num_devices=3, **{k: v for k, v in kw.items() if k not in ("availability", "epochs")})


def test_fedavg_refills_a_dropped_slot_at_the_same_version_and_waits(tmp_path):
    pop = population(tmp_path, ["always", "0:2", "1:100"])
    ev = run([1, 3, 1], concurrency=2, buffer_size=2, staleness_limit=0, partial=False, availability=pop,
             max_aggregations=1)
    b = brief(ev)
    assert b[:4] == [("start", 0.0, 0, 0), ("start", 0.0, 1, 1), ("finish", 1.0, 0, 0), ("drop", 2.0, 1, 1)]
    assert b[4][:2] == ("start", 2.0) and ev[4]["version"] == 0  # the replacement trains from w_0
    agg = next(e for e in ev if e["event"] == "aggregate")
    assert agg["time"] == 3.0 and [u["staleness"] for u in agg["updates"]] == [0, 0]
    checked(ev, pop, concurrency=2, buffer_size=2, staleness_limit=0, partial=False, num_devices=3)


def test_a_run_that_cannot_progress_stalls_with_a_reason(tmp_path):
    pop = population(tmp_path, ["0:100", "0:2"])  # windows once: nobody is online after 100
    ev = run([3, 3], concurrency=2, buffer_size=2, staleness_limit=None, partial=False, availability=pop,
             max_aggregations=None)
    assert ev[-1]["event"] == "stall" and "no device can come online again" in ev[-1]["reason"]
    assert ev[-2]["event"] == "drop" and ev[-2]["time"] == 100.0  # the job started at 99 would land at 102
    assert sum(e["event"] == "aggregate" for e in ev) == 16  # device 0 alone fills K = 2: 33 jobs by 99
    checked(ev, pop, concurrency=2, buffer_size=2, staleness_limit=None, partial=False, num_devices=2)
    ev = run([3, 3], concurrency=2, buffer_size=2, staleness_limit=None, partial=False, availability=pop,
             stall_reason="no job can land: ...")
    assert ev == [{"event": "stall", "time": 0.0, "reason": "no job can land: ..."}]


@pytest.mark.parametrize("partial", [False, True])
def test_dropout_draws_come_from_each_job_s_own_stream(partial):
    p, epoch_s = 0.3, [1 + (d % 7) for d in range(40)]
    kw = dict(concurrency=10, buffer_size=3, staleness_limit=2, partial=partial, dropout=p, seed=5,
              max_aggregations=150)
    ev = run(epoch_s, epochs=3, **kw)
    assert ev == run(epoch_s, epochs=3, **kw)
    starts = {e["job"]: e for e in ev if e["event"] == "start"}
    ends = {e["job"]: e for e in ev if e["event"] in ("finish", "drop")}
    index, dropped = {}, 0
    for job in sorted(starts):
        st = starts[job]
        k = index[st["device"]] = index.get(st["device"], -1) + 1  # the device's job index
        if job not in ends:
            continue
        u, v = stream(5, "dropout", st["device"], k).random(2)
        point = st["time"] + v * (st["epoch_ends"][-1] - st["time"])
        end = ends[job]
        if u < p and point < end["time"] + (end["event"] == "drop"):  # drop iff its point precedes its landing
            assert end["event"] == "drop" and end["time"] == point and end["cause"] == "dropout"
            dropped += 1
        else:
            assert end["event"] == "finish"
    assert 0.2 < dropped / len(ends) < 0.4
    checked(ev, None, concurrency=10, buffer_size=3, staleness_limit=2, partial=partial, num_devices=40)


def test_dropout_must_be_a_probability_below_one():
    with pytest.raises(ValueError, match="dropout"):
        Scheduler(num_devices=2, concurrency=1, buffer_size=1, staleness_limit=None, partial=False,
                  plan=fixed_plan([1, 1], 1), dropout=1.0)


def test_without_churn_keys_events_carry_no_new_fields():
    ev = run([1, 2, 3], concurrency=2, buffer_size=1, staleness_limit=None, partial=False)
    assert all(set(e) == {"event", "time", "device", "job", "version", "epoch_ends"}
               for e in ev if e["event"] == "start")
    assert not math.isnan(ev[-1]["time"])


def test_jobs_that_never_land_end_in_a_stall_not_a_hang(tmp_path):
    pop = population(tmp_path, ["0:2", "0:2"], period=10)  # 2 s windows, 3 s jobs: every job drops
    ev = run([1, 1], epochs=3, concurrency=1, buffer_size=1, staleness_limit=None, partial=False,
             availability=pop, max_aggregations=None)
    assert ev[-1]["event"] == "stall" and "no job has landed in the last 1000 jobs" in ev[-1]["reason"]
    assert sum(e["event"] == "drop" for e in ev) == 1000 and ev[-1]["time"] == ev[-2]["time"] == 9992.0


def test_lookahead_answers_for_a_dropped_job_without_reading_to_the_end(tmp_path):
    pulled = []

    def counted(events):
        for e in events:
            pulled.append(e)
            yield e

    pop = population(tmp_path, ["always", "0:2", "always"])
    sched = Scheduler(num_devices=3, concurrency=2, buffer_size=1, staleness_limit=None, partial=False,
                      plan=fixed_plan([1, 3, 1], 1), availability=pop, n_samples=[10] * 3, max_aggregations=500)
    look = Lookahead(counted(sched.events()))
    first = [next(look), next(look)]
    dropped = next(e for e in first if e["device"] == 1)["job"]
    assert look.final_epochs(dropped) is None and look.finish_time(dropped) is None
    assert len(pulled) < 20  # stopped at the drop, not at the end of 500 aggregations
    assert [e["event"] for e in look][-1] == "start"  # iteration itself is unchanged
