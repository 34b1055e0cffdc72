"""`seafl sweep --list` and `--index I`: what a SLURM job array (slurm/sweep.sbatch) runs, one run per task."""
import json
import os
import signal
import subprocess
import sys
import time

import yaml

from seafl_dist.settings import load_config
from seafl_dist.experiments import load_sweep, parse_grid_arg
from seafl_dist.runtime.rundir import config_diff, config_tree
from small_runs import QUICKSTART, ROOT, SMALL

GRID = ["--grid", "algorithm.name=seafl,fedbuff", "--grid", "algorithm.theta=0.25,0.8", "--seeds", "0,1"]
ARGS = [QUICKSTART, *SMALL, "run.max_aggregations=2", *GRID]


def seafl(*args):
    return subprocess.run([sys.executable, "-m", "seafl_dist", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_list_prints_every_run_in_index_order_with_the_overrides_that_make_it(tmp_path):
    proc = seafl("sweep", *ARGS, "--list", "--out", tmp_path / "s")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == [str(i) for i in range(8)]
    assert rows[0][1:] == ["algorithm=seafl,theta=0.25,seed=0", "algorithm.name=seafl algorithm.theta=0.25 run.seed=0"]
    assert rows[7][1] == "algorithm=fedbuff,theta=0.8,seed=1"
    assert "sbatch --array=0-7 slurm/sweep.sbatch" in proc.stderr
    assert not (tmp_path / "s").exists()  # listing writes nothing
    # the printed overrides rebuild each run's config exactly (all but the sweep's name and W&B group)
    sweep = load_sweep(QUICKSTART, grid=[parse_grid_arg("algorithm.name=seafl,fedbuff"),
                                         parse_grid_arg("algorithm.theta=0.25,0.8")], seeds=[0, 1],
                       overrides=[*SMALL, "run.max_aggregations=2"])
    for (index, name, overrides), run in zip(rows, sweep.expand()):
        assert run.name == name
        alone = load_config(QUICKSTART, [*SMALL, "run.max_aggregations=2", *overrides.split()])
        assert config_diff(config_tree(alone), config_tree(run.config)) == []  # the comparer seafl run uses


def test_index_runs_exactly_that_run_and_skips_it_once_completed(tmp_path):
    out = tmp_path / "s"
    proc = seafl("sweep", *ARGS, "--index", "5", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "run 5 (algorithm=seafl,theta=0.8,seed=1) completed" in proc.stderr and f"seafl report {out}" in proc.stderr
    run_dirs = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "configs")
    assert run_dirs == ["algorithm=seafl,theta=0.8,seed=1"]
    summary = json.loads((out / run_dirs[0] / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["aggregations"] == 2
    config = yaml.safe_load((out / run_dirs[0] / "config.yaml").read_text())
    assert (config["algorithm"]["name"], config["algorithm"]["theta"], config["run"]["seed"]) == ("seafl", 0.8, 1)
    # every task writes the whole plan, so `seafl report` finds all runs; each listed with its --index
    meta = json.loads((out / "sweep.json").read_text())
    assert sorted(r["index"] for r in meta["runs"]) == list(range(8))
    assert len(list((out / "configs").glob("*.yaml"))) == 8 and not list(out.rglob(".*.tmp"))
    assert not (out / "report.md").exists()  # the report waits for the whole array
    again = seafl("sweep", *ARGS, "--index", "5", "--out", out)
    assert again.returncode == 0 and "skip  algorithm=seafl,theta=0.8,seed=1 (completed)" in again.stderr, again.stderr


def test_index_out_of_range_or_with_list_is_one_clear_line(tmp_path):
    proc = seafl("sweep", *ARGS, "--index", "8", "--out", tmp_path / "s")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "seafl: error: --index 8: sweep 'quickstart' has 8 runs, indices 0-7; `seafl sweep ... --list` prints them"]
    assert not (tmp_path / "s").exists()
    both = seafl("sweep", *ARGS, "--index", "1", "--list")
    assert both.returncode == 2 and "argument --list: not allowed with argument --index" in both.stderr


def _processes_mentioning(text):
    """Pids whose command line contains ``text`` (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def test_sigterm_stops_the_sweep_only_after_its_run_has_stopped(tmp_path):
    """SIGTERM (scancel, preemption; sweep.sbatch forwards a time-limit warning as SIGTERM) reaches the sweep
    process: it passes SIGTERM on to its run and waits for it, instead of dying at once and leaving the run
    to be killed with the job step before it has saved anything."""
    out = tmp_path / "s"
    sweep = subprocess.Popen([sys.executable, "-m", "seafl_dist", "sweep", *map(str, ARGS), "run.max_aggregations=100000",
                              "--index", "0", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    run_dir = out / "algorithm=seafl,theta=0.25,seed=0"
    deadline = time.monotonic() + 120
    while not (run_dir / "events.jsonl").exists():  # the run is training
        assert time.monotonic() < deadline and sweep.poll() is None, sweep.communicate()
        time.sleep(0.2)
    assert _processes_mentioning(f"--out\0{run_dir}")
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=90)
    assert sweep.returncode == 130, err
    assert "stopping 1 running run(s); rerun the same command to resume" in err
    assert not _processes_mentioning(f"--out\0{run_dir}"), "the run outlived the sweep"
