"""scripts/seafl.sbatch: valid bash, and the srun/torchrun command it builds (with stand-in SLURM tools)."""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "seafl.sbatch"


def test_sbatch_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_sbatch_script_runs_torchrun_on_every_node(tmp_path):
    (tmp_path / "scontrol").write_text('#!/bin/bash\nprintf "gpu07\\ngpu08\\n"\n')
    (tmp_path / "srun").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    for tool in ("scontrol", "srun"):
        (tmp_path / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu[07-08]",
           "SLURM_NNODES": "2", "SLURM_JOB_ID": "123", "SLURM_GPUS_ON_NODE": "4"}
    proc = subprocess.run(["bash", str(SCRIPT), "configs/quickstart.yaml", "run.seed=1", "--out", "runs/a b"],
                          env=env, capture_output=True, text=True, check=True)
    args = proc.stdout.splitlines()
    assert args[:2] == ["--kill-on-bad-exit=1", "--ntasks-per-node=1"]
    assert args[2:] == ["torchrun", "--nnodes=2", "--nproc_per_node=4", "--rdzv_id=123", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=gpu07:29500", "-m", "seafl_dist", "run", "configs/quickstart.yaml",
                        "run.seed=1", "--out", "runs/a b"]
    no_args = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    assert no_args.returncode == 2 and "usage" in no_args.stderr
