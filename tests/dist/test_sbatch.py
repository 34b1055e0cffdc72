"""slurm/*.sbatch without a cluster: valid bash, the commands they build (stand-in SLURM tools), bad use.

tests/slurm/ submits the same scripts to a real single-node Slurm; what one node cannot show (two
nodes' rendezvous, GPUs) is checked here with stand-in srun/scontrol that print their arguments.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLURM = Path(__file__).resolve().parents[2] / "slurm"
SCRIPTS = ["run.sbatch", "multinode.sbatch", "sweep.sbatch"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_sbatch_script_parses_and_asks_for_signal_and_requeue(name):
    subprocess.run(["bash", "-n", str(SLURM / name)], check=True)
    text = (SLURM / name).read_text()
    assert "#SBATCH --signal=B:USR1@120" in text and "#SBATCH --requeue" in text


@pytest.fixture
def standin(tmp_path):
    """PATH with srun/scontrol/scancel that print their arguments, and a SLURM-like environment."""
    (tmp_path / "scontrol").write_text('#!/bin/bash\n[ "$1" = show ] && printf "gpu07\\ngpu08\\n" || echo "scontrol $*"\n')
    (tmp_path / "srun").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    (tmp_path / "scancel").write_text('#!/bin/bash\necho "scancel $*"\n')
    for tool in ("scontrol", "srun", "scancel"):
        (tmp_path / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu[07-08]",
            "SLURM_NNODES": "2", "SLURM_JOB_ID": "123", "SEAFL_PYTHON": sys.executable,
            "SEAFL_DRY_RUN": "0"}  # the configs named here are not on this machine; the dry run has its own tests


def run(name, *args, env):
    return subprocess.run(["bash", str(SLURM / name), *args], env=env, capture_output=True, text=True)


def test_multinode_runs_torchrun_on_every_node(standin):
    env = {**standin, "SLURM_GPUS_ON_NODE": "4"}
    proc = run("multinode.sbatch", "configs/quickstart.yaml", "run.seed=1", "--out", "runs/a b", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "--kill-on-bad-exit=1", "--nodes=2", "--ntasks-per-node=1", sys.executable, "-m", "seafl_dist.runtime.torchrun",
        "--nnodes=2", "--nproc_per_node=4", "--max-restarts=3", "--rdzv_id=123", "--rdzv_backend=c10d",
        "--rdzv_endpoint=gpu07:29623", "--rdzv_conf=join_timeout=600",
        "-m", "seafl_dist", "run", "configs/quickstart.yaml", "run.seed=1", "--out", "runs/a b"]


def test_run_uses_gpus_plus_one_else_cpus_plus_one_and_a_job_named_out(standin):
    """G GPUs: G + 1 ranks, so that G workers train (rank 0 shares GPU 0 with worker G) and none only evaluates."""
    gpu = run("run.sbatch", "configs/cifar10.yaml", env={**standin, "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_ON_NODE": "16"})
    assert gpu.returncode == 0, gpu.stderr
    args = gpu.stdout.splitlines()
    assert args[:4] == ["--nodes=1", "--ntasks=1", "--cpus-per-task=16", "--kill-on-bad-exit=1"]
    assert "--nproc_per_node=5" in args and args[-2:] == ["--out", "runs/cifar10-123"]
    assert "--max-restarts=3" in args and "5 rank(s), 4 GPU(s), 16 CPU(s)" in gpu.stderr
    cpu = run("run.sbatch", "c.yaml", "--out=x", env={**standin, "SLURM_CPUS_ON_NODE": "3", "SEAFL_MAX_RESTARTS": "0"})
    assert "--nproc_per_node=4" in cpu.stdout.splitlines() and cpu.stdout.splitlines()[-1] == "--out=x"
    assert "--max-restarts=0" in cpu.stdout.splitlines()
    visible = run("run.sbatch", "c.yaml", env={**standin, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert "--nproc_per_node=3" in visible.stdout.splitlines()


def test_sweep_task_runs_its_array_index(standin):
    proc = run("sweep.sbatch", "configs/digits/buffer_size.yaml", "--out", "runs/b",
               env={**standin, "SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_JOB_ID": "120", "SLURM_CPUS_ON_NODE": "4"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["--nodes=1", "--ntasks=1", "--cpus-per-task=4", sys.executable, "-m", "seafl_dist",
                                        "sweep", "configs/digits/buffer_size.yaml", "--out", "runs/b", "--index", "7"]


def test_time_limit_warning_stops_the_run_then_requeues(standin, tmp_path):
    """SIGUSR1 (--signal=B:USR1@120) → SIGTERM to the step (scancel), wait for the run's exit, then requeue."""
    pidfile = tmp_path / "step.pid"
    (tmp_path / "srun").write_text(f'#!/bin/bash\necho $$ > {pidfile}\ntrap "echo run got TERM; exit 3" TERM\n'
                                   'while :; do sleep 0.05; done\n')
    (tmp_path / "scancel").write_text(f'#!/bin/bash\necho "scancel $*"\nkill -TERM $(cat {pidfile})\n')
    proc = subprocess.Popen(["bash", str(SLURM / "run.sbatch"), "c.yaml"], env=standin, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 3, out  # the run's own exit status, not the signal's
    assert out.index("scancel --signal=TERM 123.0") < out.index("run got TERM") < out.index("scontrol requeue 123"), out
    pidfile.unlink()
    term = subprocess.Popen(["bash", str(SLURM / "run.sbatch"), "c.yaml"], env=standin,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while not pidfile.exists() and time.monotonic() < deadline + 20:
        time.sleep(0.05)
    term.send_signal(signal.SIGTERM)  # scancel / preemption: stop the run, no requeue by the script
    out, _ = term.communicate(timeout=20)
    assert term.returncode == 3 and "run got TERM" in out and "requeue" not in out, out


def test_scripts_refuse_to_run_outside_a_job_or_without_the_project(standin):
    for name in SCRIPTS:
        outside = run(name, "c.yaml", env={k: v for k, v in standin.items() if k != "SLURM_JOB_ID"})
        if name == "sweep.sbatch":
            outside = run(name, "c.yaml", env=standin)  # no SLURM_ARRAY_TASK_ID
        assert outside.returncode == 2 and "usage" in outside.stderr, (name, outside.stderr)
    no_project = run("run.sbatch", "c.yaml", env={**standin, "SEAFL_PYTHON": "/bin/false"})
    assert no_project.returncode == 2 and "SEAFL_PYTHON" in no_project.stderr


QUICK = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


@pytest.mark.parametrize("name", ["run.sbatch", "multinode.sbatch"])
def test_dry_run_goes_first_and_a_bad_config_starts_nothing(standin, tmp_path, name):
    env = {**standin, "SEAFL_DRY_RUN": "1", "SLURM_CPUS_ON_NODE": "2", "SLURM_NNODES": "1"}
    good = run(name, QUICK, "devices.num=12", "--out", tmp_path / "r", env=env)
    assert good.returncode == 0, good.stderr
    world = 3 if name == "run.sbatch" else 2  # C + 1 ranks on one node, C per node for multinode
    assert f"ranks: {world} ranks: rank 0 aggregates, {world - 1} worker(s) train" in good.stderr
    launcher = "torch.distributed.run" if name == "run.sbatch" else "seafl_dist.runtime.torchrun"
    assert launcher in good.stdout and not (tmp_path / "r").exists()  # the stand-in srun ran
    bad = run(name, QUICK, "algorithm.bufer_size=3", "--out", tmp_path / "r", env=env)
    assert bad.returncode == 2 and bad.stdout == "", bad.stdout  # srun never started
    assert "seafl: error: config key 'algorithm.bufer_size'" in bad.stderr
    assert f"{name}: the dry run failed (exit 2, its error above); nothing was started" in bad.stderr


def test_sweep_task_dry_runs_its_own_index(standin, tmp_path):
    env = {**standin, "SEAFL_DRY_RUN": "1", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_JOB_ID": "120"}
    args = [QUICK, "--grid", "data.name=digits,mnist", f"data.root={tmp_path / 'none'}", "--out", tmp_path / "s"]
    proc = run("sweep.sbatch", *args, env=env)
    assert proc.returncode == 2 and proc.stdout == "" and "dataset 'mnist' not found" in proc.stderr
    proc = run("sweep.sbatch", *args, env={**env, "SLURM_ARRAY_TASK_ID": "0"})
    assert proc.returncode == 0 and "data: digits" in proc.stderr and proc.stdout.splitlines()[-2:] == ["--index", "0"]
    assert not (tmp_path / "s").exists()


def test_shared_functions_are_found_through_the_package():
    """The copy sbatch runs sits in Slurm's spool dir: the scripts find common.sh by asking python."""
    where = subprocess.run([sys.executable, "-m", "seafl_dist.slurm"], capture_output=True, text=True, check=True)
    common = Path(where.stdout.strip())
    assert common.is_file() and common.parent.name == "slurm" and common.parent.parent.name == "seafl_dist"
    subprocess.run(["bash", "-n", str(common)], check=True)
    for name in SCRIPTS:
        assert '"$py" -m seafl_dist.slurm' in (SLURM / name).read_text()
