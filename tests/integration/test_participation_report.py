"""`seafl report`'s participation.csv and participation.png for tiny real runs (issue 38 A): read from the trace
alone, so a run dir holding only config.yaml, events.jsonl and metrics.csv (as any earlier version wrote them) has
them too; the counts agree with summary.json's, the shares add up to 1."""
import csv
import json
import shutil

import pytest

from device_runs import churn_overrides, write_profile
from resuming import reference
from small_runs import SMALL
from seafl_dist.report.build import write_report
from seafl_dist.report.participation import COLUMNS

FILES = ("participation.csv", "participation.pdf", "participation.png", "participation_quartiles.csv")


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def check_against_summary(run, rows):
    summary = json.loads((run / "summary.json").read_text())
    num = int(next(line.split(":")[1] for line in (run / "config.yaml").read_text().splitlines()
                   if line.strip().startswith("num:")))
    assert [int(r["device"]) for r in rows] == list(range(num))
    assert sum(float(r["weight_share"]) for r in rows) == pytest.approx(1.0)
    assert sum(int(r["jobs_started"]) for r in rows) == summary["events"]["start"]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    seen = [u for e in events if e["event"] == "aggregate" for u in e["updates"]]
    began = {e["job"]: e["time"] for e in events if e["event"] == "start"}
    for r in rows:  # a device's speed: its finished jobs only (a dropped job has no finish event)
        spans = [e["time"] - began[e["job"]] for e in events if e["event"] == "finish" and e["device"] == int(r["device"])]
        assert (float(r["mean_job_s"]) if r["mean_job_s"] else None) == (
            pytest.approx(sum(spans) / len(spans)) if spans else None)
    assert sum(int(r["updates_accepted"]) + int(r["updates_rejected"]) for r in rows) == len(seen)
    assert sum(int(r["updates_rejected"]) for r in rows) == summary["rejected_updates"]
    assert sum(int(r["jobs_dropped"]) for r in rows) == (summary.get("drops") or {}).get("total", 0)
    for r in rows:
        ended = sum(int(r[c]) for c in ("updates_accepted", "updates_rejected", "jobs_dropped", "jobs_unaggregated"))
        assert ended == int(r["jobs_started"]), r
    updates = [(float(r["mean_staleness"]), int(r["updates_accepted"]) + int(r["updates_rejected"]))
               for r in rows if r["mean_staleness"]]
    assert sum(s * n for s, n in updates) / sum(n for _, n in updates) == pytest.approx(summary["mean_staleness"])


def test_a_run_and_the_same_run_as_an_older_version_left_it(tmp_path):
    run = reference(tmp_path / "run", SMALL)  # in this process
    files = write_report([run], tmp_path / "report")["files"]
    for name in FILES:
        assert files[name].is_file() and files[name].stat().st_size > 300, name
    assert files["participation.png"].stat().st_size > 10_000
    rows = read(files["participation.csv"])
    assert list(rows[0]) == COLUMNS
    check_against_summary(run, rows)
    assert all(r["dp_sgd_epsilon"] == "" for r in rows) and "dp_sgd_epsilon.png" not in files  # no DP-SGD: blank
    theta = 0.8  # the quickstart's SEAFL: the coefficient is theta times the recorded weight
    for r in rows:
        assert float(r["coefficient"]) == pytest.approx(theta * float(r["weight"]))
    old = tmp_path / "old"  # what every version wrote: nothing of this change is needed
    old.mkdir()
    for name in ("config.yaml", "events.jsonl", "metrics.csv"):
        shutil.copy(run / name, old / name)
    again = read(write_report([old], tmp_path / "report-old")["files"]["participation.csv"])
    assert [{**r, "run": ""} for r in again] == [{**r, "run": ""} for r in rows]


def test_a_run_with_churn_counts_its_drops(tmp_path):
    profile = write_profile(tmp_path / "devices.csv")
    run = reference(tmp_path / "run", churn_overrides(profile))
    rows = read(write_report([run], tmp_path / "report")["files"]["participation.csv"])
    assert sum(int(r["jobs_dropped"]) for r in rows) > 0
    check_against_summary(run, rows)
