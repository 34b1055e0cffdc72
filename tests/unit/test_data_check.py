"""The dry run's data check reads the same labels as the loaders (so its partition is the run's), from
headers and sizes only, and finds a truncated file of each format."""
import numpy as np
import pytest

from fake_datasets import py2_pickle, random_images, write_cifar, write_cinic, write_idx
from seafl_dist.data import clear_cache, load_dataset
from seafl_dist.data.check import BadDataError, check_dataset
from seafl_dist.data.safepickle import NUMPY_ARRAYS, load_pickle
from seafl_dist.settings import DataConfig


def write_mnist(root, n_train=30, n_test=7, gz=False):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", random_images(n, 28, 28), gz=gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n), gz=gz)
    return raw


@pytest.mark.parametrize("name", ["mnist", "mnist-gz", "cifar10", "cinic10", "digits"])
def test_check_reads_the_labels_the_loader_loads(tmp_path, name):
    dataset = name.split("-")[0]
    if dataset == "mnist":
        write_mnist(tmp_path, gz=name.endswith("gz"))
    elif dataset == "cifar10":
        write_cifar(tmp_path, per_batch=5)
    elif dataset == "cinic10":
        write_cinic(tmp_path, "train", per_class=3), write_cinic(tmp_path, "test", per_class=2)
    found = check_dataset(DataConfig(name=dataset, root=str(tmp_path)), seed=4)
    clear_cache()
    train = load_dataset(dataset, tmp_path, train=True, seed=4)
    test = load_dataset(dataset, tmp_path, train=False, seed=4)
    clear_cache()
    assert np.array_equal(found.labels, train.labels.numpy())
    assert found.shape == tuple(train.images.shape[1:]) and found.n_test == len(test)
    assert found.num_classes == train.num_classes


def test_idx_file_with_a_wrong_magic_or_count(tmp_path):
    raw = write_mnist(tmp_path)
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x03" + bytes(20))
    with pytest.raises(BadDataError, match="t10k-labels-idx1-ubyte is not an IDX file of 1-d uint8 data"):
        check_dataset(DataConfig(name="mnist", root=str(tmp_path)), seed=0)
    write_idx(raw / "t10k-labels-idx1-ubyte", np.zeros(6))  # 6 labels for 7 images
    with pytest.raises(BadDataError, match="t10k has 7 images but 6 labels"):
        check_dataset(DataConfig(name="mnist", root=str(tmp_path)), seed=0)


def test_cifar_batch_whose_images_do_not_match_its_labels(tmp_path):
    write_cifar(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    entry = load_pickle(batch, allow=NUMPY_ARRAYS, encoding="bytes")  # as written: Python 2 strings, bytes here
    entry[b"labels"] = entry[b"labels"] + [3]
    batch.write_bytes(py2_pickle(entry))
    with pytest.raises(BadDataError, match="3 labels .* 6144 bytes of images"):
        check_dataset(DataConfig(name="cifar10", root=str(tmp_path)), seed=0)


def test_unreadable_file_is_one_error_naming_it(tmp_path):
    raw = write_mnist(tmp_path)
    (raw / "train-labels-idx1-ubyte").unlink()
    (raw / "train-labels-idx1-ubyte").mkdir()  # there, but not a file
    with pytest.raises(BadDataError, match=r"train-labels-idx1-ubyte cannot be read \(\[Errno 21\] Is a directory"):
        check_dataset(DataConfig(name="mnist", root=str(tmp_path)), seed=0)
    write_cinic(tmp_path, "train"), write_cinic(tmp_path, "test")
    (tmp_path / "cinic10" / "test" / "ship" / "zz.png").mkdir()  # the last PNG of its class
    with pytest.raises(BadDataError, match=r"ship/zz.png cannot be read: Is a directory; check the path"):
        check_dataset(DataConfig(name="cinic10", root=str(tmp_path)), seed=0)
