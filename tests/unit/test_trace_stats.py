"""benchmarks/trace_stats.py on a hand-made trace (K = 2, E = 5): the server's wait on a full buffer,
notified jobs and the epochs they saved, staleness, and how far the importance factor moved the weights."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "trace_stats.py"
spec = importlib.util.spec_from_file_location("trace_stats", SCRIPT)
trace_stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_stats)


def up(device, staleness, n, gamma=None, s=None):
    return {"device": device, "job": device, "staleness": staleness, "n_samples": n, "gamma": gamma, "s": s,
            "rejected": False}


EVENTS = [
    {"event": "finish", "time": 1.0, "device": 0, "job": 0, "epochs": 5},
    {"event": "finish", "time": 2.0, "device": 1, "job": 1, "epochs": 5},
    {"event": "aggregate", "time": 2.0, "version": 1, "updates": [up(0, 0, 100, 3.0, 0.5), up(1, 0, 300, 3.0, 0.7)]},
    {"event": "finish", "time": 3.0, "device": 2, "job": 2, "epochs": 5},
    {"event": "finish", "time": 5.0, "device": 4, "job": 4, "epochs": 5},
    {"event": "notify", "time": 7.0, "device": 3, "job": 3, "epochs": 2},
    {"event": "finish", "time": 8.0, "device": 3, "job": 3, "epochs": 2},
    {"event": "aggregate", "time": 8.0, "version": 2,
     "updates": [up(2, 1, 100, 2.0, 0.5), up(4, 0, 100, 3.0, 0.5), up(3, 2, 200, 1.5, 1.0)]},
]


def test_the_whole_trace():
    r = trace_stats.stats(EVENTS, buffer_size=2, epochs=5)
    assert (r["aggs"], r["jobs"], r["notified"], r["saved"]) == (2, 5, 1, 3)
    assert r["stale"] == pytest.approx((0 + 0 + 1 + 0 + 2) / 5)
    # aggregation 1 at 2.0, its 2nd update finished at 2.0; aggregation 2 at 8.0, its 2nd (in finish order) at 5.0
    assert r["wait"] == pytest.approx(3.0)
    # aggregation 1: d = 1/4, 3/4; with s: 0.875, 2.775 (sum 3.65); without: 0.25, 0.75 (sum 1)
    first = [abs(0.875 / 3.65 - 0.25), abs(2.775 / 3.65 - 0.75)]
    # aggregation 2: d = 1/4, 1/4, 1/2; with s: 0.625, 0.875, 1.25 (sum 2.75); without: 0.5, 0.75, 0.75 (sum 2)
    second = [abs(0.625 / 2.75 - 0.25), abs(0.875 / 2.75 - 0.375), abs(1.25 / 2.75 - 0.375)]
    assert r["moved"][0] == pytest.approx(max(first + second))
    assert r["moved"][1] == pytest.approx(sum(first + second) / 5)


def test_until_cuts_the_trace_and_a_rule_without_the_factor_moves_nothing(tmp_path):
    early = trace_stats.stats([e for e in EVENTS if e["time"] <= 4.0], buffer_size=2, epochs=5)
    assert (early["aggs"], early["jobs"], early["notified"], early["wait"]) == (1, 3, 0, 0.0)
    fedbuff = [dict(e, updates=[dict(u, gamma=None, s=None) for u in e["updates"]]) if e["event"] == "aggregate" else e
               for e in EVENTS]
    assert trace_stats.stats(fedbuff, buffer_size=2, epochs=5)["moved"] is None
    # a buffer of 3: aggregation 1 (two updates) has no 3rd update to wait from; aggregation 2 waits 8.0 - 8.0
    assert trace_stats.stats(EVENTS, buffer_size=3, epochs=5)["wait"] == 0.0
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    (run / "config.yaml").write_text("algorithm: {buffer_size: 2}\ntrain: {epochs: 5}\n")
    out = subprocess.run([sys.executable, str(SCRIPT), str(run), "--until", "4"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "| run | 1 | 3 | 0.00 | 0 | 0 | 0.0 | 0.0103 / 0.0103 |" in out.stdout
