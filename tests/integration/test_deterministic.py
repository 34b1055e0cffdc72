"""runtime.deterministic and runtime.cuda_graphs on a CPU (tests/gpu checks the bytes on a GPU).

A CPU run is reproducible as it is: the key changes no byte of what it trains, only config.yaml's
one line. Both keys are left out of config.yaml at their defaults (run dirs written before them
compare equal), and a model with an op that has no deterministic implementation stops before
training, in one line naming the op.
"""
import json
import os
import subprocess
import sys

import pytest
import yaml

from seafl_dist.cli import main as seafl_main
from small_runs import QUICKSTART, SMALL
from user_extensions import NONDETERMINISTIC, write


def run(tmp_path, name, *extra):
    out = tmp_path / name
    assert seafl_main(["run", str(QUICKSTART), *SMALL, "run.max_aggregations=3", *extra, "--out", str(out)]) == 0
    return out


def test_the_key_changes_no_byte_on_a_cpu_and_is_left_out_at_its_default(tmp_path):
    plain, det = run(tmp_path, "plain"), run(tmp_path, "det", "runtime.deterministic=true", "runtime.cuda_graphs=false")
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (plain / name).read_bytes() == (det / name).read_bytes(), name
    saved = yaml.safe_load((plain / "config.yaml").read_text())["runtime"]
    assert "deterministic" not in saved and "cuda_graphs" not in saved
    saved = yaml.safe_load((det / "config.yaml").read_text())["runtime"]
    assert saved["deterministic"] is True and saved["cuda_graphs"] is False


def test_cuda_graphs_may_change_on_a_completed_run(capsys, tmp_path):
    out = run(tmp_path, "done")
    capsys.readouterr()
    assert seafl_main(["run", str(QUICKSTART), *SMALL, "run.max_aggregations=3", "runtime.cuda_graphs=false",
                       "--out", str(out)]) == 0
    assert "nothing to do" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["maybe", "1", "null"])
def test_the_keys_take_true_or_false_only(capsys, tmp_path, value):
    for key in ("runtime.deterministic", "runtime.cuda_graphs"):
        assert seafl_main(["run", str(QUICKSTART), *SMALL, f"{key}={value}", "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and key in err and "true or false" in err, err


def test_an_op_without_a_deterministic_implementation_stops_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    name = write(tmp_path, NONDETERMINISTIC)
    out = tmp_path / "run"
    argv = ["run", str(QUICKSTART), *SMALL, f"model.name={name}:put_mlp", "--out", str(out)]
    try:
        assert seafl_main([*argv, "runtime.deterministic=true"]) == 2
    finally:  # the switch is process-wide and only ever turned on: leave the other tests as they were
        import torch
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
    lines = capsys.readouterr().err.strip().splitlines()
    err = lines[-1]  # after the "running ..." line: the error, one line, before anything trained
    assert "Traceback" not in "".join(lines) and [ln for ln in lines if "error" in ln] == [err], lines
    assert "runtime.deterministic=true" in err and "put_" in err and "on cpu" in err, err
    assert not (out / "events.jsonl").exists()
    assert seafl_main([*argv, "run.max_aggregations=1", "--overwrite"]) == 0  # without the key it trains


FLAGS = """
import json, os, sys, torch
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import load_config
torch.backends.cudnn.benchmark = True  # as a caller may have set it: the key must turn autotuning off
prepare(load_config(sys.argv[1], sys.argv[2:]))
print(json.dumps({"algorithms": torch.are_deterministic_algorithms_enabled(),
                  "cudnn_deterministic": torch.backends.cudnn.deterministic,
                  "cudnn_benchmark": torch.backends.cudnn.benchmark,
                  "cublas_workspace": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}))
"""


@pytest.mark.parametrize("on", [True, False])
def test_the_key_sets_torchs_deterministic_switches_when_a_run_is_prepared(on):
    """What `runtime.deterministic` promises, asserted after the real `prepare` every rank calls (issue 30):
    deterministic algorithms, deterministic cuDNN without autotuning, cuBLAS's fixed workspace; and without
    the key, the process left as it was."""
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    argv = [str(QUICKSTART), *SMALL, f"runtime.deterministic={str(on).lower()}"]
    proc = subprocess.run([sys.executable, "-c", FLAGS, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    flags = json.loads(proc.stdout.strip().splitlines()[-1])
    if on:
        assert flags == {"algorithms": True, "cudnn_deterministic": True, "cudnn_benchmark": False,
                         "cublas_workspace": ":4096:8"}
    else:
        assert flags == {"algorithms": False, "cudnn_deterministic": False, "cudnn_benchmark": True,
                         "cublas_workspace": None}
