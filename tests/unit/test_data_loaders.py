"""Loaders read tiny files written here in each dataset's real on-disk format (no downloads)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from seafl_dist.data import ArrayDataset, DataError, DatasetNotFoundError, NORMALIZATION, clear_cache, load_dataset
from seafl_dist.data.loaders import CINIC_CLASSES, digits_split

from fake_datasets import random_images, write_cifar, write_cinic, write_idx


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def test_mnist_reads_idx_files(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    tr_x, te_x = random_images(5, 28, 28, seed=1), random_images(3, 28, 28, seed=2)
    tr_y, te_y = np.array([3, 1, 4, 1, 5]), np.array([9, 2, 6])
    write_idx(raw / "train-images-idx3-ubyte", tr_x)
    write_idx(raw / "train-labels-idx1-ubyte", tr_y)
    write_idx(raw / "t10k-images-idx3-ubyte", te_x, gz=True)  # gzipped as the mirrors serve them
    write_idx(raw / "t10k-labels-idx1-ubyte", te_y, gz=True)

    train = load_dataset("mnist", root=tmp_path, train=True)
    test = load_dataset("mnist", root=tmp_path, train=False)
    assert isinstance(train, ArrayDataset) and train.name == "mnist"
    assert train.images.dtype == torch.uint8 and train.images.shape == (5, 1, 28, 28)
    assert torch.equal(train.images[:, 0], torch.from_numpy(tr_x))
    assert train.labels.tolist() == tr_y.tolist() and train.labels.dtype == torch.int64
    assert torch.equal(test.images[:, 0], torch.from_numpy(te_x)) and test.labels.tolist() == te_y.tolist()
    assert (train.num_classes, train.in_channels, train.image_size) == (10, 1, 28)
    assert load_dataset("mnist", root=tmp_path, train=True) is train  # one copy per process


def test_mnist_loads_without_torchvision_and_rejects_a_bad_idx_file(tmp_path):
    """MNIST's IDX files are read directly: a rank that loads MNIST does not pay torchvision's import."""
    import subprocess
    import sys

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", 4), ("t10k", 2)):
        write_idx(raw / f"{split}-images-idx3-ubyte", random_images(n, 28, 28, seed=n))
        write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n))
    code = ("import sys; from seafl_dist.data import load_dataset; "
            f"ds = load_dataset('mnist', root={str(tmp_path)!r}); "
            "print(len(ds), 'torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["4", "False"]
    (raw / "train-images-idx3-ubyte").write_bytes((raw / "train-images-idx3-ubyte").read_bytes()[:-5])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte is truncated: header says 4 images of 28x28 "
                                        r"\(3152 bytes\), file has 3147"):
        load_dataset("mnist", root=tmp_path, train=True)


def test_emnist_fixes_transposed_images(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    raw.mkdir(parents=True)
    upright = random_images(4, 28, 28, seed=3)
    labels = np.array([0, 46, 10, 3])
    write_idx(raw / "emnist-balanced-train-images-idx3-ubyte", upright.transpose(0, 2, 1))  # stored transposed
    write_idx(raw / "emnist-balanced-train-labels-idx1-ubyte", labels)
    ds = load_dataset("emnist", root=tmp_path, train=True)
    assert ds.name == "emnist-balanced" and ds.num_classes == 47
    assert torch.equal(ds.images[:, 0], torch.from_numpy(upright))
    assert ds.labels.tolist() == labels.tolist()

    write_idx(raw / "emnist-letters-train-images-idx3-ubyte", upright.transpose(0, 2, 1))
    write_idx(raw / "emnist-letters-train-labels-idx1-ubyte", np.array([1, 26, 5, 7]))
    assert load_dataset("emnist", root=tmp_path, emnist_split="letters").num_classes == 27
    with pytest.raises(ValueError, match="emnist_split"):
        load_dataset("emnist", root=tmp_path, emnist_split="nope")


def test_cifar10_reads_pickle_batches(tmp_path):
    written = write_cifar(tmp_path)
    train = load_dataset("cifar10", root=tmp_path, train=True)
    test = load_dataset("cifar10", root=tmp_path, train=False)
    want = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    assert torch.equal(train.images, torch.from_numpy(want))
    assert train.labels.tolist() == sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    assert torch.equal(test.images, torch.from_numpy(written["test_batch"][0]))
    assert test.labels.tolist() == written["test_batch"][1]
    assert (train.num_classes, train.in_channels, train.image_size) == (10, 3, 32)
    assert train.classes[0] == "airplane"


def test_cinic10_reads_png_folders_and_caches(tmp_path):
    expected = write_cinic(tmp_path, "train", seed=1)
    write_cinic(tmp_path, "test", per_class=1, seed=2)
    train = load_dataset("cinic10", root=tmp_path, train=True)
    assert torch.equal(train.images, torch.from_numpy(np.stack([x for _, _, x in expected])))
    assert train.labels.tolist() == [y for y, _, _ in expected]
    assert len(load_dataset("cinic10", root=tmp_path, train=False)) == 10
    assert (tmp_path / "cinic10" / ".train.seafl-cache.npz").exists()

    clear_cache()  # a second process: served from the cache file, same data
    again = load_dataset("cinic10", root=tmp_path, train=True)
    assert torch.equal(again.images, train.images) and torch.equal(again.labels, train.labels)

    clear_cache()  # a new file changes the fingerprint: the cache is rebuilt
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "cinic10" / "train" / "truck" / "zz.png")
    assert len(load_dataset("cinic10", root=tmp_path, train=True)) == 21


@pytest.mark.parametrize("folder", ["CINIC-10", ""])
def test_cinic10_is_found_under_the_archive_name_or_the_root_itself(tmp_path, folder):
    expected = write_cinic(tmp_path, "train", folder=folder)
    write_cinic(tmp_path, "test", per_class=1, folder=folder)
    train = load_dataset("cinic10", root=tmp_path, train=True)
    assert len(train) == 20 and len(load_dataset("cinic10", root=tmp_path, train=False)) == 10
    assert [int(y) for y in train.labels] == [k for k, _, _ in expected]
    assert (tmp_path / folder / ".train.seafl-cache.npz").exists()


def test_missing_cinic10_names_every_place_searched(tmp_path):
    write_cinic(tmp_path, "test", folder="CINIC-10")  # a test split alone does not make a training set
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("cinic10", root=tmp_path, train=True)
    msg = str(err.value)
    assert all(f"{p}," in msg or f"{p};" in msg for p in (tmp_path / "cinic10", tmp_path / "CINIC-10", tmp_path))
    assert "train/airplane/*.png" in msg and "\n" not in msg


@pytest.mark.parametrize("name, where, files", [
    ("mnist", "MNIST/raw", ["train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]),
    ("emnist", "EMNIST/raw", ["emnist-balanced-train-images-idx3-ubyte"]),
    ("cifar10", "cifar-10-batches-py", ["data_batch_1", "data_batch_5", "batches.meta"]),
    ("cinic10", "cinic10", ["train/airplane/*.png"]),
])
def test_missing_dataset_says_where_and_how(tmp_path, name, where, files):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, root=tmp_path, train=True)
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert f"'{name}'" in msg and str(tmp_path / where) in msg
    assert all(f in msg for f in files)
    assert "data.download=true" in msg and "http" in msg


def test_unknown_dataset_name():
    with pytest.raises(ValueError, match="cifar10"):
        load_dataset("imagenet")


def test_digits_split_is_seeded_stratified_and_disjoint():
    ds = load_dataset("digits", train=True, seed=0)
    test = load_dataset("digits", train=False, seed=0)
    assert len(ds) + len(test) == 1797 and ds.images.shape[1:] == (1, 28, 28) and ds.num_classes == 10
    from sklearn.datasets import load_digits
    y = load_digits().target
    tr, te = digits_split(y, 0, 0.2)
    assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == len(y)
    assert np.array_equal(ds.labels.numpy(), y[tr]) and np.array_equal(test.labels.numpy(), y[te])
    tr2, _ = digits_split(y, 0, 0.2)
    tr3, _ = digits_split(y, 1, 0.2)
    assert np.array_equal(tr, tr2) and not np.array_equal(tr, tr3)
    share = np.bincount(y[te], minlength=10) / np.bincount(y, minlength=10)
    assert np.all(np.abs(share - 0.2) < 0.02)  # stratified
    assert torch.equal(load_dataset("digits", seed=0).images, ds.images)


def test_batch_normalises_and_moves():
    ds = load_dataset("digits")
    idx = torch.tensor([4, 0, 7])
    x, y = ds.batch(idx)
    mean, std = ds.mean[0], ds.std[0]
    assert x.dtype == torch.float32 and x.shape == (3, 1, 28, 28)
    assert torch.allclose(x, (ds.images[idx].float() / 255 - mean) / std)
    assert torch.equal(y, ds.labels[idx])
    assert NORMALIZATION["cifar10"][0] == (0.4914, 0.4822, 0.4465)


def tiny_rgb(n=6, size=32):
    imgs = torch.from_numpy(random_images(n, 3, size, size, seed=5))
    return ArrayDataset(imgs, torch.arange(n) % 10, 10, "tiny", (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def test_augment_is_crop_and_flip_from_the_generator():
    ds = tiny_rgb()
    idx = torch.tensor([0, 1, 2, 3, 4, 5])
    x1, _ = ds.batch(idx, augment=True, generator=torch.Generator().manual_seed(7))
    x2, _ = ds.batch(idx, augment=True, generator=torch.Generator().manual_seed(7))
    x3, _ = ds.batch(idx, augment=True, generator=torch.Generator().manual_seed(8))
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)

    g = torch.Generator().manual_seed(7)  # replay the three draws and build each crop by hand
    dy, dx = torch.randint(0, 9, (6,), generator=g), torch.randint(0, 9, (6,), generator=g)
    flip = torch.rand(6, generator=g) < 0.5
    for i in range(6):
        padded = torch.nn.functional.pad(ds.images[i].float() / 255, (4, 4, 4, 4))
        crop = padded[:, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        crop = crop.flip(-1) if flip[i] else crop
        assert torch.allclose(x1[i], (crop - 0.5) / 0.25)


def test_to_device_keeps_one_copy():
    ds = tiny_rgb()
    assert ds.to("cpu") is ds
    if torch.cuda.is_available():
        gpu = ds.to("cuda")
        assert gpu is ds.to("cuda") and gpu.images.is_cuda
        x, y = gpu.batch(torch.tensor([1, 2]), augment=True, generator=torch.Generator().manual_seed(0), device="cuda")
        xc, yc = ds.batch(torch.tensor([1, 2]), augment=True, generator=torch.Generator().manual_seed(0))
        assert torch.allclose(x.cpu(), xc) and torch.equal(y.cpu(), yc)
