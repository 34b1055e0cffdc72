"""`seafl run` end to end on every dataset format (tiny generated files) and every model, in this process
(``here``: no interpreter start importing torch and Lightning)."""
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import in_process
from one_line import one_error_line
from fake_datasets import RunsCommand, random_images, write_cifar, write_cinic, write_idx

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")

TINY = ["devices.num=4", "devices.concurrency=2", "algorithm.buffer_size=1", "train.epochs=1",
        "run.max_aggregations=2", "data.partition=iid", "logging.progress=none", "runtime.threads=1"]


def here(*args):
    """``seafl ARGS`` in this process (tests/in_process.py), with the warnings a real process shows on its stderr
    (pytest would record them instead), so that ``one_error_line`` still fails on one."""
    return in_process.seafl(*args, console=True)


def seafl_run(out, *overrides):
    proc = here("run", QUICKSTART, *TINY, *overrides, "--out", out)
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
    proc = here("run", QUICKSTART, "data.name=cifar10", f"data.root={tmp_path}", "--out", tmp_path / "run")
    assert proc.returncode == 2
    assert "cifar10" in proc.stderr and str(tmp_path) in proc.stderr and "data.download" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- bad data, tried as a user would: one line naming the file, exit 2, no traceback -----------

def truncate(path, keep):
    path.write_bytes(path.read_bytes()[:keep])
    return path


def write_tampered_cifar(root):
    write_cifar(root)
    f = root / "cifar-10-batches-py" / "data_batch_1"
    f.write_bytes(pickle.dumps({"data": RunsCommand(f"touch {root / 'pwned'}"), "labels": []}, protocol=2))
    return f


def write_bad_emnist(root):
    raw = root / "EMNIST" / "raw"
    raw.mkdir(parents=True)
    write_idx(raw / "emnist-balanced-train-images-idx3-ubyte", random_images(6, 28, 28))
    write_idx(raw / "emnist-balanced-train-labels-idx1-ubyte", np.arange(6))
    write_idx(raw / "emnist-balanced-test-images-idx3-ubyte", random_images(2, 28, 28))
    write_idx(raw / "emnist-balanced-test-labels-idx1-ubyte", np.arange(5))
    return raw / "emnist-balanced-test-images-idx3-ubyte"


def write_bad_cinic(root):
    write_cinic(root, "train")
    write_cinic(root, "test", per_class=1)
    return truncate(root / "cinic10" / "train" / "frog" / "cifar10-train-1.png", 50)


@pytest.mark.parametrize("name, writer, says", [
    ("mnist", lambda r: (write_mnist(r), truncate(r / "MNIST" / "raw" / "train-images-idx3-ubyte", 1016))[1],
     "is truncated: header says 40 images of 28x28 (31376 bytes), file has 1016"),
    ("emnist", write_bad_emnist, "holds 2 images but"),
    ("cifar10", lambda r: truncate(write_cifar(r) and r / "cifar-10-batches-py" / "test_batch", 300),
     "is truncated or corrupt: not a readable pickle"),
    ("cifar10", write_tampered_cifar, "is refused: the pickle asks for posix.system"),
    ("cinic10", write_bad_cinic, "is truncated or corrupt: PIL cannot decode it"),
])
def test_bad_dataset_file_is_one_line(tmp_path, name, writer, says):
    root = tmp_path / "data"
    root.mkdir()
    bad = writer(root)
    assert_one_error_line(tmp_path, [f"data.name={name}", f"data.root={root}"], [str(bad), says])
    assert not (root / "pwned").exists()


def test_unknown_emnist_split_is_one_line(tmp_path):
    write_bad_emnist(tmp_path)
    assert_one_error_line(tmp_path, ["data.name=emnist", "data.emnist_split=nope", f"data.root={tmp_path}"],
                          ["config key 'data.emnist_split' has value 'nope'; allowed: one of byclass, bymerge, balanced"])


def assert_one_error_line(tmp_path, overrides, fragments):
    """``seafl run`` exits 2 with exactly one ``seafl: error:`` line holding ``fragments``, no traceback."""
    proc = here("run", QUICKSTART, *TINY, *overrides, "--out", tmp_path / "run")
    assert proc.returncode == 2, proc.stderr
    one_error_line(proc.stderr, *fragments)
