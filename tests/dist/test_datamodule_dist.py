"""A LightningDataModule whose split differs between torchrun ranks stops the run in one line naming data.name (one
that splits alike gives the one process's bytes: test_features_on_ranks.py)."""
import os
import subprocess

import pytest

from datamodules import ARGS, write
from launching import clean_env, torchrun_cmd
from small_runs import SMALL

pytestmark = pytest.mark.dist


def torchrun(mods, args, out, cwd):
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(mods)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run(torchrun_cmd(3, *args, "--out", out), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_split_that_differs_between_ranks_stops_the_run_in_one_line(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    name = write(mods)
    proc = torchrun(mods, [*SMALL, *ARGS(name, "Unsplit")], tmp_path / "w3", tmp_path)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "seafl: error:" in line]
    assert lines and all("config key 'data.name'" in line and "differs between rank 0 and rank" in line
                         and "setup must split alike" in line for line in lines), proc.stderr[-3000:]
    assert "seafl_dist/" not in proc.stderr  # no traceback of ours (torchrun prints its own ChildFailedError)
