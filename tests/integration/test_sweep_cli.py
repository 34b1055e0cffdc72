"""`seafl sweep` and `seafl report` end to end on tiny digits runs (each run its own process)."""
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seafl_dist.runtime.cpus import cpus_here

REPO = Path(__file__).resolve().parents[2]
TINY = """\
algorithm: {name: seafl, buffer_size: 2, staleness_limit: 4}
devices: {num: 8, concurrency: 4}
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9}
clock: {sec_per_sample: 0.01, idle: {distribution: zipf, s: 1.7, max: 20}}
data: {name: digits, partition: dirichlet, concentration: 0.5}
model: {name: lenet5}
run: {seed: 0, max_aggregations: 5, targets: [0.3, 0.999]}
logging: {progress: none}
"""
TARGETS = [0.3, 0.999]  # 0.999 is never reached in 5 aggregations


def seafl(*args, cwd=None, check=True):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check and proc.returncode != 0:
        raise AssertionError(f"seafl {' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def metrics(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def first_time(rows, target):  # SPEC "Metrics", written out independently of the package
    return next((r["time"] for r in rows if r["accuracy"] >= target), math.inf)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("cfg")
    (d / "tiny.yaml").write_text(TINY)
    return d / "tiny.yaml"


@pytest.fixture(scope="module")
def sweep(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "s"
    proc = seafl("sweep", tiny, "--grid", "algorithm.name=seafl,fedbuff", "--seeds", "0,1", "--jobs", "2",
                 "--out", out)
    return out, proc


NAMES = [f"algorithm={a},seed={s}" for s in (0, 1) for a in ("seafl", "fedbuff")]


def test_sweep_runs_every_point_two_at_a_time(sweep):
    out, proc = sweep
    for name in NAMES:
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["aggregations"] == 5
        cfg = (out / name / "config.yaml").read_text()
        assert f"threads: {max(1, cpus_here() // 2)}" in cfg and "group: tiny" in cfg  # the sweep name
    lines = proc.stderr.splitlines()
    assert "all 4 runs completed" in proc.stderr
    starts = [i for i, line in enumerate(lines) if " start " in line]
    dones = [i for i, line in enumerate(lines) if " done " in line]
    assert len(starts) == len(dones) == 4 and starts[1] < dones[0]  # two in flight at once
    meta = json.loads((out / "sweep.json").read_text())
    assert [r["name"] for r in meta["runs"]] == sorted(NAMES, key=lambda n: (not n.startswith("algorithm=seafl"), n))


def test_report_matches_the_runs_own_metrics(sweep):
    out, _ = sweep
    proc = seafl("report", out, "--target", "0.3,0.999", "--baseline", "fedbuff")
    assert "| algorithm=seafl |" in proc.stdout and "never" in proc.stdout
    with open(out / "runs.csv") as f:
        runs = {r["run"]: r for r in csv.DictReader(f)}
    with open(out / "report.csv") as f:
        groups = {r["label"]: r for r in csv.DictReader(f)}
    for alg in ("seafl", "fedbuff"):
        per_seed = [metrics(out / f"algorithm={alg},seed={s}") for s in (0, 1)]
        for s, rows in enumerate(per_seed):
            row = runs[f"algorithm={alg},seed={s}"]
            for t in TARGETS:
                assert float(row[f"ttt_{t:g}"]) == pytest.approx(first_time(rows, t))
            assert float(row["best_accuracy"]) == pytest.approx(max(r["accuracy"] for r in rows))
            assert float(row["final_accuracy"]) == pytest.approx(rows[-1]["accuracy"])
            assert int(row["aggregations"]) == int(rows[-1]["version"]) == 5
            assert float(row["virtual_time"]) == pytest.approx(rows[-1]["time"])
        g = groups[f"algorithm={alg}"]
        assert g["runs"] == "2" and g["algorithm.name"] == alg
        assert float(g["ttt_0.999_mean"]) == math.inf and g["ttt_0.999_reached"] == "0"
        reached = [first_time(rows, 0.3) for rows in per_seed if math.isfinite(first_time(rows, 0.3))]
        assert int(g["ttt_0.3_reached"]) == len(reached)
        if reached:
            assert float(g["ttt_0.3_mean"]) == pytest.approx(sum(reached) / len(reached))
        best = [max(r["accuracy"] for r in rows) for rows in per_seed]
        assert float(g["best_accuracy_mean"]) == pytest.approx(sum(best) / 2)
    fedbuff = groups["algorithm=fedbuff"]
    if fedbuff["ttt_0.3_reached"] == "2":  # the baseline against itself
        assert float(fedbuff["ratio_0.3"]) == 1.0
    for name in ("report.md", "report.csv", "runs.csv"):
        assert (out / name).stat().st_size > 100
    png = (out / "accuracy_vs_time.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_the_sweeps_report_has_participation_per_arm(sweep):
    """participation.csv: a row per device of every run; participation_quartiles.csv: each arm's speed quartiles,
    mean over its two seeds; the figure as PNG and PDF (issue 38 A)."""
    out, _ = sweep
    with open(out / "participation.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted({r["run"] for r in rows}) == sorted(NAMES) and len(rows) == 4 * 8
    for name in NAMES:
        assert sum(float(r["weight_share"]) for r in rows if r["run"] == name) == pytest.approx(1.0)
    with open(out / "participation_quartiles.csv") as f:
        quartiles = list(csv.DictReader(f))
    assert [(q["point"], q["quartile"], q["seeds"]) for q in quartiles] == [
        (f"algorithm={a}", str(i), "2") for a in ("seafl", "fedbuff") for i in range(1, 5)]
    for arm in ("seafl", "fedbuff"):
        shares = [float(q["share_mean"]) for q in quartiles if q["point"] == f"algorithm={arm}"]
        assert sum(shares) == pytest.approx(1.0)
    png = (out / "participation.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert (out / "participation.pdf").read_bytes()[:5] == b"%PDF-"


def test_rerun_skips_completed_runs_and_redoes_the_rest(sweep, tiny):
    out, _ = sweep
    stamp = {n: (out / n / "summary.json").stat().st_mtime_ns for n in NAMES}
    (out / NAMES[3] / "summary.json").unlink()  # as if the sweep had been killed during this run
    proc = seafl("sweep", tiny, "--grid", "algorithm.name=seafl,fedbuff", "--seeds", "0,1", "--jobs", "2",
                 "--out", out)
    assert "3 already completed, 1 to run" in proc.stderr
    assert proc.stderr.count("skip ") == 3 and f"start {NAMES[3]}" in proc.stderr
    for n in NAMES[:3]:
        assert (out / n / "summary.json").stat().st_mtime_ns == stamp[n]
    assert json.loads((out / NAMES[3] / "summary.json").read_text())["status"] == "completed"


def test_a_failed_run_does_not_stop_the_others(tiny, tmp_path):
    out = tmp_path / "f"
    proc = seafl("sweep", tiny, "data.root=" + str(tmp_path / "no-data"), "--grid", "data.name=mnist,digits",
                 "--jobs", "2", "--out", out, check=False)
    assert proc.returncode == 1
    assert "FAILED data=mnist,seed=0" in proc.stderr and "1 of 2 runs failed: data=mnist,seed=0" in proc.stderr
    assert json.loads((out / "data=digits,seed=0" / "summary.json").read_text())["status"] == "completed"
    assert (out / "report.md").exists()  # the report covers what did finish


def test_report_of_one_run_draws_its_timeline(sweep, tmp_path):
    out, _ = sweep
    proc = seafl("report", out / NAMES[0], "--out", tmp_path / "r", "--until", "50")
    assert "| seafl |" in proc.stdout
    for name in ("timeline.png", "accuracy_vs_time.png"):
        png = (tmp_path / "r" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_dry_run_writes_nothing_and_prints_commands(tiny, tmp_path):
    proc = seafl("sweep", tiny, "--grid", "algorithm.buffer_size=1,2", "--launcher", "torchrun --nproc_per_node=2",
                 "--out", tmp_path / "d", "--dry-run")
    assert proc.stderr.count("torchrun --nproc_per_node=2 -m seafl_dist run") == 2
    # one run at a time, but two ranks share the CPUs
    assert f"each rank gets runtime.threads={max(1, cpus_here() // 2)}" in proc.stderr
    assert not (tmp_path / "d").exists()  # no sweep.json, no configs, no run dirs


def test_a_missing_profile_stops_the_sweep_before_any_run(tiny, tmp_path):
    """A relative devices.profile resolves from where the sweep runs: from elsewhere, one line names
    the point, the key and the fix, and nothing is written; from the right directory it runs."""
    (tmp_path / "p.csv").write_text("id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows\n"
                                    "a,0.01,inf,inf,,always\n")
    args = ["sweep", tiny, "--grid", "devices.profile=p.csv", "run.max_aggregations=2", "--out", tmp_path / "s"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = seafl(*args, cwd=elsewhere, check=False)
    assert proc.returncode == 2 and "point 'profile=p.csv': devices.profile=p.csv is not a file" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "s").exists()
    seafl(*args, cwd=tmp_path)
    assert json.loads((tmp_path / "s" / "profile=p.csv,seed=0" / "summary.json").read_text())["status"] == "completed"
