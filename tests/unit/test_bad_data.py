"""A truncated, corrupt or mixed-up dataset file is one DataError line naming the file and what is wrong."""
from __future__ import annotations

import gzip
import os
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from seafl_dist.data import DataError, clear_cache, load_dataset
from seafl_dist.data.safepickle import UnsafePickleError

from fake_datasets import RunsCommand, cifar_batch, py2_pickle, random_images, write_cifar, write_cinic, write_idx


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def write_mnist(root, n_train=4, n_test=2):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        write_idx(raw / f"{split}-images-idx3-ubyte", random_images(n, 28, 28, seed=n))
        write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    return raw


def data_error(name, root, **kw) -> str:
    with pytest.raises(DataError) as err:
        load_dataset(name, root=root, **kw)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# ---- MNIST / EMNIST ----------------------------------------------------------------------------

@pytest.mark.parametrize("damage, expected", [
    (lambda b: b[:1016], "is truncated: header says 4 images of 28x28 (3152 bytes), file has 1016"),
    (lambda b: b + b"\0" * 7, "is corrupt: header says 4 images of 28x28 (3152 bytes), file has 3159"),
    (lambda b: b[:10], "is truncated: 10 bytes, shorter than its 16-byte header"),
    (lambda b: b"", "is not an IDX file of 3-d uint8 data: it starts with bytes (none: the file is empty)"),
    (lambda b: b"<html>" + b, "is not an IDX file of 3-d uint8 data: it starts with bytes 3c68746d, expected 00000803"),
    (lambda b: gzip.compress(b), "is gzip-compressed but not named .gz: rename it to train-images-idx3-ubyte.gz"),
])
def test_damaged_mnist_images_file(tmp_path, damage, expected):
    raw = write_mnist(tmp_path)
    f = raw / "train-images-idx3-ubyte"
    f.write_bytes(damage(f.read_bytes()))
    assert data_error("mnist", tmp_path).startswith(f"{f} {expected}")


def test_mnist_from_two_downloads_or_with_bad_labels(tmp_path):
    raw = write_mnist(tmp_path)
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(3))
    assert data_error("mnist", tmp_path) == (f"{raw / 'train-images-idx3-ubyte'} holds 4 images but "
                                             f"{raw / 'train-labels-idx1-ubyte'} holds 3 labels: the two files are "
                                             f"from different downloads or one is cut")
    write_idx(raw / "train-labels-idx1-ubyte", np.array([1, 2, 200, 3]))
    assert data_error("mnist", tmp_path) == f"{raw / 'train-labels-idx1-ubyte'} is corrupt: it holds label 200, outside 0..9"
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(4))
    write_idx(raw / "train-images-idx3-ubyte", random_images(4, 32, 32))
    assert data_error("mnist", tmp_path) == f"{raw / 'train-images-idx3-ubyte'} holds images of 32x32, expected 28x28"


@pytest.mark.parametrize("cut", [True, False])
def test_damaged_gzip(tmp_path, cut):
    raw = write_mnist(tmp_path)
    f = raw / "t10k-labels-idx1-ubyte"
    packed = gzip.compress(f.read_bytes())
    (raw / (f.name + ".gz")).write_bytes(packed[:-12] if cut else b"not gzip at all")
    f.unlink()
    msg = data_error("mnist", tmp_path, train=False)
    assert msg.startswith(f"{raw / f.name}.gz is truncated or corrupt: gzip cannot decompress it (")
    assert not f.exists() and not list(raw.glob("*.tmp"))  # no half-decompressed file left to be read next time


def test_truncated_emnist(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    raw.mkdir(parents=True)
    write_idx(raw / "emnist-letters-train-images-idx3-ubyte", random_images(3, 28, 28))
    write_idx(raw / "emnist-letters-train-labels-idx1-ubyte", np.array([1, 26, 27]))
    f = raw / "emnist-letters-train-labels-idx1-ubyte"
    assert data_error("emnist", tmp_path, emnist_split="letters") == \
        f"{f} is corrupt: it holds label 27, outside 0..26"
    f.write_bytes(f.read_bytes()[:-1])
    assert data_error("emnist", tmp_path, emnist_split="letters") == \
        f"{f} is truncated: header says 3 labels (11 bytes), file has 10"


# ---- CIFAR-10 ----------------------------------------------------------------------------------

def test_cifar_batch_that_runs_code_is_refused(tmp_path):
    write_cifar(tmp_path)
    marker = tmp_path / "pwned"
    f = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    f.write_bytes(pickle.dumps({"data": RunsCommand(f"touch {marker}"), "labels": []}, protocol=2))
    with pytest.raises(UnsafePickleError) as err:
        load_dataset("cifar10", root=tmp_path)
    assert str(err.value).startswith(f"{f} is refused: the pickle asks for {os.system.__module__}.system")
    assert not marker.exists()


def test_truncated_cifar_batch(tmp_path):
    write_cifar(tmp_path)
    f = tmp_path / "cifar-10-batches-py" / "test_batch"
    f.write_bytes(f.read_bytes()[:5000])
    assert data_error("cifar10", tmp_path, train=False).startswith(
        f"{f} is truncated or corrupt: not a readable pickle (")


@pytest.mark.parametrize("batch, expected", [
    ({b"data": np.zeros((2, 1024), np.uint8), b"labels": [1, 2]},
     "its 'data' is a uint8 array of shape (2, 1024), expected uint8 rows of 3072 bytes (32x32 RGB)"),
    ({b"labels": [1, 2]}, "its 'data' is missing, expected uint8 rows"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]},
     "2 images but 'labels' is list of 1 entries, expected 2 integers"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 10]}, "is corrupt: it holds label 10, outside"),
    ([1, 2, 3], "is not a CIFAR-10 batch: it holds a list, expected a dict"),
])
def test_cifar_batch_of_the_wrong_shape(tmp_path, batch, expected):
    write_cifar(tmp_path)
    f = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    f.write_bytes(py2_pickle(batch))
    msg = data_error("cifar10", tmp_path)
    assert msg.startswith(str(f)) and expected in msg


def test_cifar_meta_without_class_names(tmp_path):
    write_cifar(tmp_path)
    f = tmp_path / "cifar-10-batches-py" / "batches.meta"
    f.write_bytes(py2_pickle({b"num_vis": 3072}))
    assert data_error("cifar10", tmp_path).startswith(f"{f} is not CIFAR-10's batches.meta: 'label_names'")


def test_cifar_batch_in_python_2_format_loads(tmp_path):
    """The real files' format: protocol 2, Python 2 str keys, numpy under numpy.core, array bytes as str."""
    imgs = random_images(3, 3, 32, 32, seed=4)
    write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(py2_pickle(cifar_batch("test_batch", imgs, [7, 0, 9])))
    test = load_dataset("cifar10", root=tmp_path, train=False)
    assert torch.equal(test.images, torch.from_numpy(imgs)) and test.labels.tolist() == [7, 0, 9]


# ---- CINIC-10 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("damage, expected", [
    (lambda b: b[:60], "is truncated or corrupt: PIL cannot decode it ("),
    (lambda b: b"", "is truncated or corrupt: PIL cannot decode it ("),
])
def test_damaged_cinic_png(tmp_path, damage, expected):
    write_cinic(tmp_path, "train")
    f = tmp_path / "cinic10" / "train" / "ship" / "cifar10-train-1.png"
    f.write_bytes(damage(f.read_bytes()))
    assert data_error("cinic10", tmp_path).startswith(f"CINIC-10 image {f} {expected}")


def test_cinic_png_of_the_wrong_size(tmp_path):
    write_cinic(tmp_path, "train")
    f = tmp_path / "cinic10" / "train" / "dog" / "big.png"
    Image.fromarray(np.zeros((64, 48, 3), np.uint8)).save(f)
    assert data_error("cinic10", tmp_path) == f"CINIC-10 image {f} is 48x64, expected 32x32"


@pytest.mark.parametrize("damage", [lambda b: b[:len(b) // 2], lambda b: b"garbage", "shapes"])
def test_bad_cinic_cache_is_rebuilt(tmp_path, capfd, damage):
    write_cinic(tmp_path, "train")
    first = load_dataset("cinic10", root=tmp_path)
    cache = tmp_path / "cinic10" / ".train.seafl-cache.npz"
    if damage == "shapes":
        with np.load(cache) as z:
            np.savez(cache, images=z["images"][:3], labels=z["labels"][:3], fingerprint=z["fingerprint"])
    else:
        cache.write_bytes(damage(cache.read_bytes()))
    clear_cache()
    capfd.readouterr()
    again = load_dataset("cinic10", root=tmp_path)
    assert torch.equal(again.images, first.images) and torch.equal(again.labels, first.labels)
    err = capfd.readouterr().err
    assert err.startswith(f"seafl: warning: ignoring the unreadable CINIC-10 cache {cache} (") and err.count("\n") == 1
    with np.load(cache) as z:  # rewritten whole
        assert z["images"].shape == (20, 3, 32, 32)
