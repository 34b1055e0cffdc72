"""A LightningDataModule under torchrun W = 3 (issue 39 B.1, B.3): ``prepare_data`` runs once on the node, every
rank sets it up with ``setup``'s ``random_split`` seeded alike, and the run dir is the one process's byte for byte,
with Dirichlet from declared labels and with a natural partition by a group key of the samples (each group's own
test samples held out, rank 0 evaluating them); a DataModule whose split differs between ranks stops the run in
one line naming data.name."""
import os
import subprocess

import pytest
import torch

from datamodules import ARGS, write
from launching import clean_env, torchrun_cmd
from small_runs import QUICKSTART, SMALL
from seafl_dist.cli import main as seafl_main
from seafl_dist.data import clear_cache

pytestmark = pytest.mark.dist


def torchrun(mods, args, out, cwd):
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(mods)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run(torchrun_cmd(3, *args, "--out", out), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("datamodule, extra", [
    ("Prepared", ["data.partition=dirichlet"]),
    ("SpeakersDM", ["data.partition=natural", "data.partition_by=speaker", "devices.num=null", "data.device_test=writers",
                    "run.eval_every=3", "run.device_eval_every=3"]),
], ids=["declared labels", "groups by a key"])
def test_three_ranks_give_the_one_process_bytes(tmp_path, monkeypatch, datamodule, extra):
    mods = tmp_path / "mods"
    mods.mkdir()
    name = write(mods)
    args = [*SMALL, *ARGS(name, datamodule), *extra]
    monkeypatch.syspath_prepend(str(mods))
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            assert seafl_main(["run", str(QUICKSTART), *args, f"data.root={tmp_path / 'd1'}", "--out",
                               str(tmp_path / "w1")]) == 0
    finally:
        torch.set_num_threads(threads)
        clear_cache()
    proc = torchrun(mods, [*args, f"data.root={tmp_path / 'd3'}"], tmp_path / "w3", tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on 3 ranks" in proc.stderr
    for d in ("d1", "d3"):  # prepare_data ran once on the one node, as in one process
        assert len((tmp_path / d / "prepared.txt").read_text().split()) == 1, d
    files = ["events.jsonl", "metrics.csv", "model.pt", "partition.json"]
    for file in files + (["device_metrics.csv"] if "data.device_test=writers" in extra else []):
        assert (tmp_path / "w1" / file).read_bytes() == (tmp_path / "w3" / file).read_bytes(), file


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
