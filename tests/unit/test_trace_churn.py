"""The trace checker on runs with availability windows and dropouts (report/churn_replay.py)."""
import copy
import json

import pytest
import yaml

from seafl_dist.report.trace import check_trace, main
from seafl_dist.sim import Scheduler
from tests.unit.test_churn import HEADER, fixed_plan, population

M, K, BETA = 3, 2, 1


@pytest.fixture()
def pop(tmp_path):
    # six devices: two always on, the others with windows that close mid-job and reopen
    return population(tmp_path, ["always", "0:7 9:40", "3:30", "always", "0:4 6:45", "2:12 15:50"], period=50)


def schedule(pop, dropout=None, partial=True, max_aggregations=12):
    sched = Scheduler(num_devices=6, concurrency=M, buffer_size=K, staleness_limit=BETA, partial=partial,
                      plan=fixed_plan([1, 2, 3, 1.5, 2.5, 4], 3), availability=pop, dropout=dropout, seed=1,
                      n_samples=[10] * 6, max_aggregations=max_aggregations)
    return list(sched.events())


def check(events, pop, **kw):
    return check_trace(events, concurrency=M, buffer_size=K, staleness_limit=BETA, partial=True, schedule_only=True,
                       num_devices=6, population=pop, **kw)


def assert_reports(problems, *fragments):
    text = "\n".join(problems)
    assert problems, "expected a violation"
    for f in fragments:
        assert f in text, f"{f!r} not in:\n{text}"


def test_scheduler_traces_with_drops_pass(pop):
    for dropout in (None, 0.3):
        ev = schedule(pop, dropout)
        kinds = {e.get("cause") for e in ev if e["event"] == "drop"}
        assert "offline" in kinds and (dropout is None or "dropout" in kinds)
        assert check(ev, pop, dropout=dropout or 0.0) == []
        assert check(ev, None) == []  # without the population: the rules that need no availability


def test_a_start_on_an_offline_device(pop):
    ev = schedule(pop)
    i = next(i for i, e in enumerate(ev) if e["event"] == "start" and e["time"] > 0)
    offline = next(d for d in range(6) if not pop.is_available(d, ev[i]["time"]))
    ev[i]["device"] = offline
    assert_reports(check(ev, pop), f"starts on device {offline}, which is offline at {ev[i]['time']}")


def test_a_missing_start_is_a_slot_left_free(pop):
    ev = schedule(pop)
    i = max(i for i, e in enumerate(ev) if e["event"] == "start" and e["time"] > 0)
    del ev[i]
    assert_reports(check(ev, pop), "slot(s) free")


def test_a_drop_off_its_window_close(pop):
    ev = schedule(pop)
    i = next(i for i, e in enumerate(ev) if e["event"] == "drop")
    ev[i]["time"] -= 0.5
    assert_reports(check(ev, pop, dropout=0.0), "neither at its window's close")
    assert not any("neither at" in p for p in check(ev, pop, dropout=None))  # inside the span: a dropout
    ev = schedule(pop)
    drop = ev.pop(i)  # the job is now still in flight after its device went offline
    assert_reports(check(ev, pop), f"job {drop['job']} (device {drop['device']}) is still in flight after its "
                                   f"device went offline")


def test_a_slot_that_waits_while_a_device_is_online(tmp_path):
    pop = population(tmp_path, ["always", "5:100"])
    sched = Scheduler(num_devices=2, concurrency=2, buffer_size=1, staleness_limit=None, partial=False,
                      plan=fixed_plan([1, 1], 3), availability=pop, n_samples=[10] * 2, max_aggregations=3)
    ev = list(sched.events())
    kw = dict(concurrency=2, buffer_size=1, staleness_limit=None, partial=False, schedule_only=True, num_devices=2)
    assert check_trace(ev, population=pop, **kw) == []
    late = copy.deepcopy(ev)
    i = next(i for i, e in enumerate(late) if e["event"] == "start" and e["time"] == 5.0)
    late[i]["time"] = 5.5
    late[i]["epoch_ends"] = [b + 0.5 for b in late[i]["epoch_ends"]]
    assert_reports(check_trace(late, population=pop, **kw), "slot(s) waited from t=3.0, but idle device 1 was "
                                                            "online at 5.0")


def test_stall_must_be_last_and_aggregation_after_a_releasing_drop(pop):
    ev = schedule(pop)
    ev.insert(5, {"event": "stall", "time": ev[4]["time"], "reason": "test"})
    assert_reports(check(ev, pop), "an event follows the stall event")
    ev = schedule(pop, partial=False, max_aggregations=40)
    released = [i for i, e in enumerate(ev[:-1]) if e["event"] == "drop" and ev[i + 1]["event"] == "aggregate"]
    assert released, "the fixture must have a drop that releases an aggregation"
    del ev[released[0] + 1]
    assert_reports(check(ev, pop), "but no aggregation follows")


def test_command_line_checks_availability_with_a_profile(tmp_path, pop, capsys):
    ev = schedule(pop)
    run = tmp_path / "run"
    run.mkdir()
    cfg = {"algorithm": {"name": "seafl2", "buffer_size": K, "staleness_limit": BETA},
           "devices": {"num": 6, "concurrency": M}, "clock": {"upload_s": 0.0}, "train": {"epochs": 3},
           "data": {"seed": None}, "run": {"seed": 0}}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
    assert main([str(run), "--profile", str(tmp_path / "p.csv")]) == 1
    out = capsys.readouterr().out
    assert "no eval events" in out and "offline" not in out  # a schedule has no evals; a run has
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "x,0.01,1,1,,nan:3\n")
    assert main([str(run), "--profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.csv line 2 field 'windows'" in err
