"""`seafl run` with device profiles, availability windows and dropouts (issue 17, docs/devices.md).

Runs on the bundled digits (tests/device_runs.py writes the profile): they complete, the trace
checker (``python -m seafl_dist.report.trace RUN --profile FILE``) passes, drops are counted in
summary.json and metrics.csv; a population that never comes back ends ``stalled`` with one line;
a bad profile is one line and exit 2, from the run and from the dry run; and without the new keys
config.yaml and metrics.csv are what they were.
"""
import csv
import json
import subprocess
import sys
from pathlib import Path

import torch

from device_runs import CHURN, GONE, churn_overrides, sha256, write_profile
from one_line import one_error_line
from small_runs import QUICKSTART, SMALL
from seafl_dist.cli import main as seafl_main
from seafl_dist.settings import dump_config, load_config

ROOT = Path(__file__).resolve().parents[2]


def run(out: Path, overrides, capsys=None) -> int:
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            return seafl_main(["run", str(QUICKSTART), *overrides, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)


def trace_check(out: Path, *profile) -> subprocess.CompletedProcess:
    args = ["--profile", str(profile[0])] if profile else []
    return subprocess.run([sys.executable, "-m", "seafl_dist.report.trace", str(out), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def metric_rows(out: Path) -> list[dict]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_profile_and_dropout_run_completes_and_checks(tmp_path):
    profile = write_profile(tmp_path / "devices.csv")
    out = tmp_path / "run"
    assert run(out, churn_overrides(profile, "algorithm.name=seafl2", "train.epochs=2",
                                    "algorithm.staleness_limit=1")) == 0
    s = summary(out)
    assert s["status"] == "completed" and s["aggregations"] == 6
    ev = events(out)
    drops = [e for e in ev if e["event"] == "drop"]
    assert s["drops"] == {"total": len(drops), "offline": sum(e["cause"] == "offline" for e in drops),
                          "dropout": sum(e["cause"] == "dropout" for e in drops)}
    assert s["drops"]["offline"] > 0 and s["drops"]["dropout"] > 0
    assert s["profile_sha256"] == sha256(profile)
    aggregated = {u["job"] for e in ev if e["event"] == "aggregate" for u in e["updates"]}
    assert not aggregated & {e["job"] for e in drops}  # a dropped job is never aggregated
    agg_times = {e["time"] for e in ev if e["event"] == "aggregate"}
    assert any(e["event"] == "start" and e["time"] not in agg_times and e["time"] > 0 for e in ev)
    assert all("download_s" in e and "upload_s" in e for e in ev if e["event"] == "start")
    rows = metric_rows(out)
    assert list(rows[0]) [-1] == "drops" and int(rows[-1]["drops"]) == len(drops)
    checked = trace_check(out, profile)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK" in checked.stderr
    tree = (out / "config.yaml").read_text()
    assert f"profile: {profile}" in tree and "dropout: 0.2" in tree and "distribution: none" in tree


def test_dropout_alone_and_fedavg_under_dropout(tmp_path):
    for name in ("seafl", "fedavg"):
        out = tmp_path / name
        assert run(out, [*CHURN, f"algorithm.name={name}", "devices.dropout=0.3"]) == 0
        s = summary(out)
        assert s["status"] == "completed" and s["aggregations"] == 6
        assert s["drops"]["total"] > 0 and s["drops"]["offline"] == 0 and "profile_sha256" not in s
        checked = trace_check(out)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # FedAvg (K = M, beta = 0): every aggregation takes M updates of its own version
    for e in events(tmp_path / "fedavg"):
        if e["event"] == "aggregate":
            assert len(e["updates"]) == 4 and all(u["staleness"] == 0 for u in e["updates"])


def test_a_population_that_never_comes_back_stalls(tmp_path, capsys):
    profile = write_profile(tmp_path / "gone.csv", GONE)
    out = tmp_path / "run"
    assert run(out, [*SMALL, f"devices.profile={profile}", "run.max_aggregations=100"]) == 0
    s = summary(out)
    assert s["status"] == "stalled" and s["aggregations"] < 100
    assert "no device can come online again" in s["stalled"] and "\n" not in s["stalled"]
    assert events(out)[-1] == {"event": "stall", "time": 8.0, "reason": s["stalled"]}
    assert f"  stalled: {s['stalled']}" in capsys.readouterr().out
    assert not list(out.glob("checkpoint-*")) and not (out / "private").exists() and (out / "model.pt").is_file()
    checked = trace_check(out, profile)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert run(out, [*SMALL, f"devices.profile={profile}", "run.max_aggregations=100"]) == 0  # finished: nothing to do
    assert summary(out) == s
    assert f"{out} already holds a stalled run of this config" in capsys.readouterr().err


def test_bad_profile_is_one_line_exit_2_from_run_and_dry_run(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("sec_per_sample,download_bytes_per_s,upload_bytes_per_s,windows\n0.1,1000,nan,always\n")
    for extra in ([], ["--dry-run"]):
        assert run(tmp_path / "run", [*SMALL, f"devices.profile={bad}", *extra]) == 2
        one_error_line(capsys.readouterr().err, f"profile {bad} line 2 field 'upload_bytes_per_s': 'nan' is not a")
        assert not (tmp_path / "run").exists()
    assert run(tmp_path / "run", [*SMALL, "devices.dropout=1.0"]) == 2
    one_error_line(capsys.readouterr().err, "config key 'devices.dropout' has value 1.0")


def test_dry_run_prints_the_population(tmp_path, capsys):
    profile = write_profile(tmp_path / "devices.csv")
    assert run(tmp_path / "run", [*churn_overrides(profile), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dropout: each job drops with probability 0.2" in out
    assert f"profile: {profile} (4 rows, sha256 {sha256(profile)[:12]}...)" in out and "online at t=0" in out
    gone = write_profile(tmp_path / "short.csv", GONE.replace("0:8", "0:0.001"))
    assert run(tmp_path / "run", [*SMALL, f"devices.profile={gone}", "--dry-run"]) == 0
    assert "warning: the run would stall at once: no job can land" in capsys.readouterr().out


def test_population_summaries_total_counts_but_not_seconds():
    """Shard sizes get a total; seconds per sample (a float per device) get none: no 0.10000000000000007."""
    from seafl_dist.runtime.dryrun import summarise
    assert summarise([600] * 13) == "min 600, median 600, max 600 (total 7800 over 13 devices)"
    assert summarise([0.001] * 100, total=False) == "min 0.001, median 0.001, max 0.001 over 100 devices"
    assert summarise([0.5, 0.25]) == "0.5, 0.25" and summarise([1_000_000, 3]) == "1000000, 3"


def test_without_the_new_keys_config_and_metrics_are_unchanged(tmp_path):
    cfg = load_config(QUICKSTART, SMALL)
    text = dump_config(cfg)
    for name in ("profile:", "dropout:", "availability_scale:", "compute_scale:"):
        assert name not in text
    assert "distribution: zipf" in text  # quickstart's idle times stay
    with_profile = load_config(QUICKSTART, [*SMALL, "devices.profile=p.csv"])
    assert with_profile.clock.idle.distribution == "zipf"  # quickstart sets clock.idle: kept, added on top
    bare = load_config(ROOT / "configs" / "quickstart.yaml", ["devices.profile=p.csv"])
    assert bare.clock.idle.distribution == "zipf"
    from seafl_dist.settings import config_from_dict
    plain = config_from_dict({"devices": {"profile": "p.csv"}})
    assert plain.clock.idle.distribution == "none"  # a profile carries the speed: no idle unless set
    assert config_from_dict({"devices": {"profile": "p.csv"}, "clock": {"idle": {"max": 5}}}).clock.idle.distribution \
        == "zipf"
    assert config_from_dict(__import__("yaml").safe_load(dump_config(plain))) == plain  # config.yaml reloads the same
    out = tmp_path / "run"
    assert run(out, SMALL) == 0
    assert list(metric_rows(out)[0])[-1] == "rejected"
    s = summary(out)
    assert "drops" not in s and "profile_sha256" not in s and "stalled" not in s
