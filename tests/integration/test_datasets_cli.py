"""`seafl run` end to end on every dataset format (tiny generated files) and every model."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fake_datasets import random_images, write_cifar, write_cinic, write_idx

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")

TINY = ["devices.num=4", "devices.concurrency=2", "algorithm.buffer_size=1", "train.epochs=1",
        "run.max_aggregations=2", "data.partition=iid", "logging.progress=none", "runtime.threads=1"]


def seafl_run(out, *overrides):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", QUICKSTART, *TINY, *overrides,
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["aggregations"] == 2
    return summary, json.loads((out / "partition.json").read_text())


def write_mnist(root, n_train=40, n_test=10):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    write_idx(raw / "train-images-idx3-ubyte", random_images(n_train, 28, 28, seed=1))
    write_idx(raw / "train-labels-idx1-ubyte", rng.integers(0, 10, n_train))
    write_idx(raw / "t10k-images-idx3-ubyte", random_images(n_test, 28, 28, seed=2))
    write_idx(raw / "t10k-labels-idx1-ubyte", rng.integers(0, 10, n_test))


@pytest.mark.parametrize("name, model, writer, n_train", [
    ("mnist", "lenet5", write_mnist, 40),
    ("cifar10", "resnet18", lambda root: write_cifar(root, per_batch=8), 40),
    ("cinic10", "vgg16", lambda root: (write_cinic(root, "train", per_class=4), write_cinic(root, "test", per_class=1)),
     40),
])
def test_run_on_real_format_files(tmp_path, name, model, writer, n_train):
    writer(tmp_path / "data")
    _, part = seafl_run(tmp_path / "run", f"data.name={name}", f"data.root={tmp_path / 'data'}",
                        f"model.name={model}", "model.width=0.125", "data.augment=true")
    assert part["dataset"].startswith(name) and sum(part["n_samples"]) == n_train
    assert len(part["label_histograms"]) == 4


@pytest.mark.parametrize("model", ["resnet18", "vgg16"])
def test_digits_with_small_cnns(tmp_path, model):
    summary, _ = seafl_run(tmp_path / "run", f"model.name={model}", "model.width=0.125")
    assert 0.0 <= summary["final_accuracy"] <= 1.0


def test_missing_dataset_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", QUICKSTART, "data.name=cifar10",
                           f"data.root={tmp_path}", "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "cifar10" in proc.stderr and str(tmp_path) in proc.stderr and "data.download" in proc.stderr
    assert "Traceback" not in proc.stderr
