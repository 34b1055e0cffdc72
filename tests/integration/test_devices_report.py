"""`seafl report` of runs with device churn (issue 17, point 6): the timeline marks drops and keeps to at
most 200 device rows; a profiled run also gets population.png (devices online, jobs in flight)."""
import json

from device_runs import churn_overrides, write_profile
from resuming import reference
from seafl_dist.report.build import write_report
from seafl_dist.report.churn_plots import in_flight
from seafl_dist.report.plots import ROWS, _rows, plot_timeline


def test_report_of_a_profiled_run_with_drops(tmp_path, capsys):
    profile = write_profile(tmp_path / "devices.csv")
    out = reference(tmp_path / "run", churn_overrides(profile))  # in this process
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "drop" for e in events)
    files = write_report([out], tmp_path / "report")["files"]
    for name in ("timeline.png", "population.png"):
        assert files[name].is_file() and files[name].stat().st_size > 10_000, name
    times, counts = in_flight(events)
    assert max(counts) == 4 and counts[-1] == sum(e["event"] == "start" for e in events) - sum(
        e["event"] in ("finish", "drop") for e in events)
    profile.unlink()  # the profile is gone: the report still comes, without population.png, and says why
    files = write_report([out], tmp_path / "report2")["files"]
    assert "population.png" not in files and "timeline.png" in files
    assert "no population.png: profile" in capsys.readouterr().err


def test_timeline_of_a_large_population_shows_at_most_rows_devices(tmp_path):
    events, job = [], 0
    for k in range(1000):  # 1000 devices, device 7k+3 three jobs, the others one; every tenth job drops
        for j in range(3 if k % 7 == 3 else 1):
            t = float(k + 10 * j)
            events.append({"event": "start", "time": t, "device": k, "job": job, "version": 0, "epoch_ends": [t + 5]})
            events.append({"event": "drop" if job % 10 == 0 else "finish", "time": t + 4, "device": k, "job": job,
                           **({"cause": "dropout"} if job % 10 == 0 else {"epochs": 1})})
            job += 1
    events.sort(key=lambda e: e["time"])
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    row, label = _rows([e["device"] for e in events if e["event"] == "start"])
    busy = [k for k in range(1000) if k % 7 == 3]  # 143 devices with three jobs, then the lowest ids
    assert len(row) == ROWS and set(busy) <= set(row) and sorted(row) == sorted(busy + [
        k for k in range(1000) if k % 7 != 3][:ROWS - len(busy)])
    assert list(row.values()) == list(range(ROWS)) and "200 of 1000" in label
    assert plot_timeline(path, tmp_path / "timeline.png").stat().st_size > 10_000
    assert _rows([0, 5, 3]) == ({d: d for d in range(6)}, None)  # a small run: rows are the device ids
