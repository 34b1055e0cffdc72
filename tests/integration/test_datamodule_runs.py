"""A LightningDataModule as the data (issue 39 B.1, B.2): dict samples of variable length, padded by its collate,
trained by both loops to the same bits and evaluated by the module's own test_step; Dirichlet from the labels its
dataset declares; and every DataModule that does not fit, refused in one line with exit 2 and no run dir."""
import json
import os
import subprocess
import sys

import pytest

from datamodules import ARGS, write
from one_line import one_error_line
from small_runs import QUICKSTART, SMALL


def env_with(folder):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def seafl(folder, *args, out):
    return subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *args, "--out", str(out)],
                          env=env_with(folder), cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dm")
    return folder, write(folder)


def test_both_loops_train_a_datamodules_dict_samples_to_the_same_bits(mod, tmp_path):
    folder, name = mod
    args = [*ARGS(name), "data.partition=dirichlet"]
    plain = seafl(folder, *args, out=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    lightning = seafl(folder, *args, "train.loop=lightning", out=tmp_path / "lightning")
    assert lightning.returncode == 0, lightning.stderr[-3000:]
    for file in ("model.pt", "metrics.csv", "events.jsonl"):
        assert (tmp_path / "plain" / file).read_bytes() == (tmp_path / "lightning" / file).read_bytes(), file
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["target_metric"] == "test_acc"
    assert summary["best"] > 0.7  # test_acc, the test_step's own metric; 4 classes: chance is 0.25
    part = json.loads((tmp_path / "plain" / "partition.json").read_text())
    hist = part["label_histograms"]  # Dirichlet from the labels Words declares, read through random_split's Subset
    assert part["dataset"] == f"{name}:WordsDM" and len(hist) == 10 and len(hist[0]) == 4
    assert [sum(h) for h in hist] == part["n_samples"] and sum(part["n_samples"]) == 400


def test_an_iid_split_needs_no_labels(mod, tmp_path):
    folder, name = mod
    proc = seafl(folder, *ARGS(name, "Unlabelled"), out=tmp_path / "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = json.loads((tmp_path / "r" / "partition.json").read_text())
    assert "label_histograms" not in part and part["n_samples"] == [40] * 10


@pytest.mark.parametrize("extra, fragments", [
    (["data.name={m}:Streams"], ["data.name", "Streams", "IterableDataset", "map-style Dataset"]),
    (["data.name={m}:NoLoader"], ["data.name", "NoLoader", "train_dataloader() failed"]),
    (["data.name={m}:Unlabelled", "data.partition=dirichlet"], ["data.partition", "'dirichlet'", "allowed: iid",
                                                               "declare no integer labels"]),
    (["model.name=lenet5"], ["model.name", "'lenet5'", "an import path", "any structure", "lenet5 takes images"]),
    (["model.name={m}:no_test_step", "run.target_metric=accuracy"], ["model.name", "no_test_step", "test_step",
                                                                      "batches are dict"]),
    (["data.augment=true"], ["data.augment", "True", "allowed: false", "augment in its dataset or collate"]),
])
def test_what_does_not_fit_is_refused_in_one_line(mod, tmp_path, extra, fragments):
    folder, name = mod
    proc = seafl(folder, *ARGS(name), *[e.format(m=name) for e in extra], out=tmp_path / "r")
    assert proc.returncode == 2
    one_error_line(proc.stderr, *fragments)
    assert not (tmp_path / "r").exists()


def test_a_dry_run_sets_it_up_and_probes_the_model_but_prepares_and_writes_nothing(mod, tmp_path):
    folder, name = mod
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *ARGS(name, "Prepared"),
                           f"data.root={tmp_path / 'data'}", "--out", str(tmp_path / "r"), "--dry-run"],
                          env=env_with(folder), cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"data: {name}:Prepared (a LightningDataModule): 400 training and 120 test samples" in proc.stdout
    assert f"model: {name}:bag_of_words (width 1), 388 parameters" in proc.stdout
    assert "shard sizes (iid): 40, 40, 40" in proc.stdout
    assert not (tmp_path / "data").exists() and not (tmp_path / "r").exists()
