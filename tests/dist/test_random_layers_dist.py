"""A user's model with a Dropout layer under torchrun W = 3 gives the one process's run byte for
byte: each job's random layers draw from the job's own stream, whichever rank trains it and in
whatever order (runtime/executor.py job_seeds)."""
import os
import subprocess

import pytest

from launching import clean_env, torchrun_cmd
from resuming import reference
from small_runs import SMALL
from user_extensions import LAYERS, write

pytestmark = pytest.mark.dist


def test_dropout_model_on_three_ranks_is_the_one_process_run(tmp_path, monkeypatch):
    mods = tmp_path / "mods"
    mods.mkdir()
    name = write(mods, LAYERS, prefix="layers")
    args = [*SMALL, f"model.name={name}:dropout_mlp", "train.epochs=2"]
    monkeypatch.syspath_prepend(str(mods))
    reference(tmp_path / "w1", args)  # one process: this one
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(mods)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(torchrun_cmd(3, *args, "--out", tmp_path / "w3"), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on 3 ranks" in proc.stderr
    for f in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "w3" / f).read_bytes() == (tmp_path / "w1" / f).read_bytes(), f
