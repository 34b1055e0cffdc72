"""The trace checker (seafl_dist.report.trace): silent on good traces, precise on broken ones."""
import copy
import json

import pytest
import yaml

from seafl_dist.report.trace import check_run, check_trace, main
from seafl_dist.sim import Scheduler

EPOCH_S = [1.0, 1.0, 1.0, 10.0, 1.0, 1.5]  # device 3 is the straggler
PARAMS = dict(concurrency=4, buffer_size=2, staleness_limit=1)


def plan(device, _job_index, start, download=0.25):
    b, ends = start + download, []
    for _ in range(3):
        b += EPOCH_S[device]
        ends.append(b)
    return ends


def with_evals(events):
    """Add what the server adds: weights, an eval at version 0 and after every aggregation."""
    out = [{"event": "eval", "time": 0.0, "version": 0, "accuracy": 0.1, "loss": 2.3}]
    for ev in events:
        ev = copy.deepcopy(ev)
        out.append(ev)
        if ev["event"] == "aggregate":
            for u in ev["updates"]:
                u["weight"] = 1.0 / len(ev["updates"])
            out.append({"event": "eval", "time": ev["time"], "version": ev["version"], "accuracy": 0.5, "loss": 1.0})
    return out


def trace(partial=True, upload_s=0.5, max_aggregations=8):
    sched = Scheduler(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=1, partial=partial,
                      plan=plan, seed=0, upload_s=upload_s, n_samples=[10] * 6, max_aggregations=max_aggregations)
    return with_evals(sched.events())


def check(events, partial=True, **kw):
    return check_trace(events, **{**PARAMS, "partial": partial, **kw})


def index(events, kind, nth=0, pred=lambda e: True):
    return [i for i, e in enumerate(events) if e["event"] == kind and pred(e)][nth]


def assert_reports(problems, *fragments):
    text = "\n".join(problems)
    assert problems, "expected a violation"
    for f in fragments:
        assert f in text, f"{f!r} not in:\n{text}"


@pytest.fixture(scope="module")
def good():
    ev = trace()
    assert any(e["event"] == "notify" for e in ev), "the fixture must exercise notifications"
    return ev


def test_good_traces_pass(good):
    assert check(good) == []
    assert check(good, upload_s=0.5, epochs=3) == []
    assert check(trace(partial=False), partial=False) == []
    assert check(trace(partial=False, upload_s=0.0), partial=False, upload_s=0.0) == []


def test_schedule_only_needs_no_evals_or_weights():
    raw = list(Scheduler(num_devices=6, concurrency=4, buffer_size=2, staleness_limit=1, partial=True, plan=plan,
                         upload_s=0.5, max_aggregations=5).events())
    assert check(raw, schedule_only=True) == []
    assert_reports(check(raw), "no eval events", "lacks keys ['weight']")


def test_time_order(good):
    ev = copy.deepcopy(good)
    i = index(ev, "finish", 3)
    ev[i]["time"] = -1.0
    assert_reports(check(ev), f"line {i + 1} ", "before the previous event")


def test_required_keys_and_unknown_events(good):
    ev = copy.deepcopy(good)
    del ev[index(ev, "start")]["epoch_ends"]
    assert_reports(check(ev), "missing required keys ['epoch_ends']")
    ev = copy.deepcopy(good)
    del ev[index(ev, "aggregate")]["updates"][0]["n_samples"]
    assert_reports(check(ev), "lacks keys ['n_samples']")
    ev = copy.deepcopy(good)
    ev.insert(3, {"event": "restart", "time": 0.0})
    assert_reports(check(ev), "unknown event type 'restart'")


def test_duplicate_job_id(good):
    ev = copy.deepcopy(good)
    starts = [i for i, e in enumerate(ev) if e["event"] == "start"]
    ev[starts[-1]]["job"] = ev[starts[0]]["job"]
    assert_reports(check(ev), "used twice")


def test_start_version_and_busy_device(good):
    ev = copy.deepcopy(good)
    i = index(ev, "start", 0, lambda e: e["version"] == 2)
    ev[i]["version"] = 1
    assert_reports(check(ev), "starts from version 1, the current version is 2")
    ev = copy.deepcopy(good)
    first = [e for e in ev if e["event"] == "start"][:2]
    first[1]["device"] = first[0]["device"]
    assert_reports(check(ev), f"device {first[0]['device']} starts job {first[1]['job']} while its job")


def test_concurrency_after_aggregation(good):
    ev = copy.deepcopy(good)
    i = index(ev, "start", 0, lambda e: e["version"] == 3)
    dropped = ev.pop(i)
    assert_reports(check(ev), "jobs in flight after the starts of aggregation to version 3, expected M = 4",
                   f"job {dropped['job']}")
    ev = copy.deepcopy(good)
    ev.pop(index(ev, "start"))
    assert_reports(check(ev), "3 jobs in flight after the starts of time 0")


def test_aggregate_takes_exactly_the_buffer(good):
    ev = copy.deepcopy(good)
    agg = ev[index(ev, "aggregate", 2)]
    lost = agg["updates"].pop()
    assert_reports(check(ev), "the finished-but-unaggregated jobs are", str(lost["job"]))


def test_at_least_k(good):
    ev = copy.deepcopy(good)
    agg = ev[index(ev, "aggregate", 0)]
    agg["updates"] = agg["updates"][:1]
    assert_reports(check(ev, buffer_size=2), "fewer than K = 2")


def test_staleness_reported_and_bounded(good):
    ev = copy.deepcopy(good)
    i = index(ev, "aggregate", 0, lambda e: any(u["staleness"] == 1 for u in e["updates"]))
    u = next(u for u in ev[i]["updates"] if u["staleness"] == 1)
    u["staleness"] = 0
    assert_reports(check(ev), f"update of job {u['job']} has staleness 0, expected")
    # the same (correct) trace judged against a smaller beta breaks the limit
    assert_reports(check(good, staleness_limit=0), "> β = 0")


def test_version_increments_by_one(good):
    ev = copy.deepcopy(good)
    i = index(ev, "aggregate", 1)
    ev[i]["version"] = 5
    assert_reports(check(ev), "aggregation makes version 5, expected 2")


def test_finish_time_must_match_plan(good):
    ev = copy.deepcopy(good)
    notified = {e["job"] for e in ev if e["event"] == "notify"}
    i = index(ev, "finish", 0, lambda e: e["job"] not in notified)
    ev[i]["time"] += 1e-3
    assert_reports(check(ev, upload_s=0.5), f"job {ev[i]['job']} finishes at", "planned b_E + upload_s")
    # with upload_s inferred the first plain finish fixes it: the next ones then disagree
    assert check(good) == []


def test_notified_finish_is_the_end_of_the_epoch_in_progress(good):
    ev = copy.deepcopy(good)
    n = ev[index(ev, "notify")]
    i = index(ev, "finish", 0, lambda e: e["job"] == n["job"])
    start = next(e for e in ev if e["event"] == "start" and e["job"] == n["job"])
    assert ev[i]["epochs"] < len(start["epoch_ends"])
    ev[i]["time"] = start["epoch_ends"][-1] + 0.5  # as if it had not been notified
    ev[i]["epochs"] = len(start["epoch_ends"])
    assert_reports(check(ev), "end of the epoch in progress at its notification", "expected")


def test_notify_only_when_partial(good):
    assert_reports(check(good, partial=False), "does not use partial training")


def test_every_blocker_is_notified(good):
    ev = copy.deepcopy(good)
    i = index(ev, "notify")
    job = ev.pop(i)["job"]
    assert_reports(check(ev), f"blocking jobs [{job}] were not notified")


def test_aggregation_as_soon_as_allowed():
    # two devices, K=1: after device 0 finishes the server must aggregate at once
    ev = [{"event": "eval", "time": 0.0, "version": 0, "accuracy": 0.1, "loss": 1.0},
          {"event": "start", "time": 0.0, "device": 0, "job": 0, "version": 0, "epoch_ends": [1.0]},
          {"event": "start", "time": 0.0, "device": 1, "job": 1, "version": 0, "epoch_ends": [2.0]},
          {"event": "finish", "time": 1.0, "device": 0, "job": 0, "epochs": 1},
          {"event": "finish", "time": 2.0, "device": 1, "job": 1, "epochs": 1},
          {"event": "aggregate", "time": 2.0, "version": 1, "updates": [
              {"device": d, "job": d, "staleness": 0, "n_samples": 5, "weight": 0.5} for d in (0, 1)]},
          {"event": "eval", "time": 2.0, "version": 1, "accuracy": 0.2, "loss": 1.0}]
    kw = dict(concurrency=2, buffer_size=1, staleness_limit=None, partial=False)
    assert_reports(check_trace(ev, **kw), "line 5 ", "but no aggregation follows")
    assert check_trace(ev, **{**kw, "buffer_size": 2}) == []
    # beta = 0 (FedAvg): device 1 blocks, so waiting is right; an early aggregate is not
    assert check_trace(ev, **{**kw, "staleness_limit": 0}) == []
    early = ev[:4] + [{**ev[5], "time": 1.0, "updates": ev[5]["updates"][:1]}]
    assert_reports(check_trace(early, **{**kw, "staleness_limit": 0}), "block it")


def test_ties_are_broken_by_device_id():
    ev = [{"event": "start", "time": 0.0, "device": d, "job": d, "version": 0, "epoch_ends": [3.0]} for d in (0, 1, 2)]
    ev += [{"event": "finish", "time": 3.0, "device": d, "job": d, "epochs": 1} for d in (1, 0)]
    kw = dict(concurrency=3, buffer_size=3, staleness_limit=None, partial=False, schedule_only=True)
    assert_reports(check_trace(ev, **kw), "not in device order (device 1 before device 0)")
    ev[3], ev[4] = ev[4], ev[3]
    assert check_trace(ev, **kw) == []


def test_overdue_job_is_reported(good):
    ev = copy.deepcopy(good)
    i = index(ev, "finish", 1)
    late = ev.pop(i)
    assert_reports(check(ev, upload_s=0.5), f"job {late['job']} (device {late['device']}) should have finished")


def test_evals(good):
    no_eval = [e for e in good if e["event"] != "eval"]
    assert_reports(check(no_eval), "no eval events")
    ev = copy.deepcopy(good)
    ev[index(ev, "eval", 2)]["version"] = 7
    assert_reports(check(ev), "eval of version 7")
    ev = [e for e in copy.deepcopy(good)]
    ev.pop(max(i for i, e in enumerate(ev) if e["event"] == "eval"))
    assert_reports(check(ev), "the last version (8) is never evaluated")
    ev = copy.deepcopy(good)
    ev[index(ev, "eval", 1)]["accuracy"] = 1.5
    assert_reports(check(ev), "accuracy 1.5")


def test_limit_caps_the_messages(good):
    ev = copy.deepcopy(good)
    for e in ev:
        e["time"] = -e["time"]  # every later event goes back in time
    problems = check(ev, limit=3)
    assert len(problems) == 4 and problems[-1].startswith("... and ")


def write_run(tmp_path, events, **alg):
    cfg = {"algorithm": {"name": "seafl2", "buffer_size": 2, "staleness_limit": 1, **alg},
           "devices": {"num": 6, "concurrency": 4}, "clock": {"upload_s": 0.5}, "train": {"epochs": 3}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return tmp_path


def test_check_run_reads_the_config(tmp_path, good, capsys):
    run = write_run(tmp_path, good)
    assert check_run(run) == []
    assert main([str(run)]) == 0
    write_run(tmp_path, good, name="seafl")  # not partial: the notifications are now wrong
    assert_reports(check_run(run), "does not use partial training")
    assert main([str(run)]) == 1
    assert "does not use partial training" in capsys.readouterr().out
    assert main([]) == 2
