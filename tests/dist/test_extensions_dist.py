"""A user's model, dataset, partition and rule under torchrun W = 3: every rank imports them and loads
the dataset, and the run dir is the one process's, event for event."""
import csv
import json
import os
import subprocess

import pytest
import torch

from launching import clean_env, torchrun_cmd
from small_runs import QUICKSTART, SMALL
from seafl_dist.cli import main as seafl_main
from seafl_dist.data import clear_cache
from user_extensions import EXTENDED, write

pytestmark = pytest.mark.dist


def test_user_extensions_give_the_same_run_on_three_ranks(tmp_path, monkeypatch):
    mods = tmp_path / "mods"
    mods.mkdir()
    name = write(mods)
    args = [*SMALL, *EXTENDED(name)]
    monkeypatch.syspath_prepend(str(mods))
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            assert seafl_main(["run", str(QUICKSTART), *args, "--out", str(tmp_path / "w1")]) == 0
    finally:
        torch.set_num_threads(threads)
        clear_cache()
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(mods)] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = torchrun_cmd(3, *args, "--out", tmp_path / "w3")
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on 3 ranks" in proc.stderr
    ref, got = tmp_path / "w1", tmp_path / "w3"
    assert (ref / "events.jsonl").read_bytes() == (got / "events.jsonl").read_bytes()
    rows = [list(csv.DictReader(open(d / "metrics.csv"))) for d in (ref, got)]
    assert len(rows[0]) == len(rows[1]) == 7
    for r, g in zip(*rows):
        assert abs(float(r["accuracy"]) - float(g["accuracy"])) <= 1e-6 and r["version"] == g["version"]
    summary = json.loads((got / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["algorithm"] == f"{name}:uniform_mean"
    assert json.loads((got / "partition.json").read_text())["dataset"] == f"{name}:bands"
