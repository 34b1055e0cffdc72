"""The dry run's data check reads the same labels as the loaders (so its partition is the run's), from
headers and sizes only, and stops at a bad file with the very line the run would print."""
import gzip
import pickle

import numpy as np
import pytest
from PIL import Image

from fake_datasets import RunsCommand, py2_pickle, random_images, write_cifar, write_cinic, write_idx
from leaf_files import WRITERS, write_leaf
from seafl_dist.data import DataError, clear_cache, load_dataset
from seafl_dist.data.check import check_dataset
from seafl_dist.settings import DataConfig


def write_mnist(root, n_train=30, n_test=7, gz=False):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", random_images(n, 28, 28), gz=gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n), gz=gz)
    return raw


@pytest.mark.parametrize("name", ["mnist", "mnist-gz", "cifar10", "cinic10", "digits", "femnist"])
def test_check_reads_the_labels_the_loader_loads(tmp_path, name):
    dataset = name.split("-")[0]
    if dataset == "mnist":
        write_mnist(tmp_path, gz=name.endswith("gz"))
    elif dataset == "cifar10":
        write_cifar(tmp_path, per_batch=5)
    elif dataset == "cinic10":
        write_cinic(tmp_path, "train", per_class=3), write_cinic(tmp_path, "test", per_class=2)
    elif dataset == "femnist":
        write_leaf(tmp_path)
    found = check_dataset(DataConfig(name=dataset, root=str(tmp_path)), seed=4)
    clear_cache()
    train = load_dataset(dataset, tmp_path, train=True, seed=4)
    test = load_dataset(dataset, tmp_path, train=False, seed=4)
    clear_cache()
    assert np.array_equal(found.labels, train.labels.numpy())
    assert found.shape == tuple(train.images.shape[1:]) and found.n_test == len(test)
    assert found.num_classes == train.num_classes
    if dataset == "femnist":  # the writers too: the natural partition is the run's
        assert found.writers == train.writers == list(WRITERS) and np.array_equal(found.offsets, train.offsets)


def same_error(root, name) -> str:
    """The check's one-line DataError for the dataset in ``root``, which must be the run's own line
    (the loader runs second: it may unpack or cache)."""
    with pytest.raises(DataError) as checked:
        check_dataset(DataConfig(name=name, root=str(root)), seed=0)
    clear_cache()
    with pytest.raises(DataError) as loaded:
        load_dataset(name, root, train=True), load_dataset(name, root, train=False)
    clear_cache()
    assert type(checked.value) is type(loaded.value)
    assert str(checked.value) == str(loaded.value) and "\n" not in str(checked.value)
    return str(checked.value)


def _cut_gz(raw):  # a gzip stream cut short: only the run's gunzip, or the check's count, finds it
    f = raw / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:-12])
    return f


def _cut_inside_gz(raw):  # a whole gzip of a cut IDX file: the run reads it after unpacking
    f = raw / "train-images-idx3-ubyte"
    write_idx(f, random_images(30, 28, 28), gz=True)
    data = gzip.decompress(f.with_name(f.name + ".gz").read_bytes())
    f.with_name(f.name + ".gz").write_bytes(gzip.compress(data[:-40]))
    return f


@pytest.mark.parametrize("gz, damage, expected", [
    (False, lambda raw: (raw / "train-images-idx3-ubyte").write_bytes(
        (raw / "train-images-idx3-ubyte").read_bytes()[:-40]), "is truncated: header says 30 images of 28x28"),
    (True, _cut_gz, "is truncated or corrupt: gzip cannot decompress it ("),
    (True, _cut_inside_gz, "is truncated: header says 30 images of 28x28 (23536 bytes), file has 23496"),
    (False, lambda raw: (raw / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x03" + bytes(20)),
     "is not an IDX file of 1-d uint8 data: it starts with bytes 00000803, expected 00000801"),
    (False, lambda raw: (raw / "t10k-labels-idx1-ubyte").write_bytes(
        gzip.compress((raw / "t10k-labels-idx1-ubyte").read_bytes())), "is gzip-compressed but not named .gz"),
    (False, lambda raw: write_idx(raw / "t10k-labels-idx1-ubyte", np.zeros(6)), "holds 7 images but"),
    (False, lambda raw: write_idx(raw / "train-labels-idx1-ubyte", np.full(30, 10)), "it holds label 10, outside 0..9"),
    (False, lambda raw: write_idx(raw / "t10k-images-idx3-ubyte", random_images(7, 32, 32)),
     "holds images of 32x32, expected 28x28"),
    (False, lambda raw: ((raw / "train-labels-idx1-ubyte").unlink(), (raw / "train-labels-idx1-ubyte").mkdir()),
     "cannot read dataset file"),
])
def test_bad_idx_file_is_the_runs_error(tmp_path, gz, damage, expected):
    damage(write_mnist(tmp_path, gz=gz))
    assert expected in same_error(tmp_path, "mnist")


def _rewrite(path, change):
    entry = pickle.loads(path.read_bytes(), encoding="bytes")  # our own test file: Python 2 strings as bytes
    path.write_bytes(py2_pickle(change(entry)))


@pytest.mark.parametrize("victim, change, expected", [
    ("data_batch_1", lambda e: {**e, b"labels": e[b"labels"] + [3]}, "2 images but 'labels' is list of 3 entries"),
    ("data_batch_2", lambda e: {**e, b"data": e[b"data"].reshape(4, 1536)}, "its 'data' is a uint8 array of shape "
                                                                             "(4, 1536), expected uint8 rows of 3072"),
    ("data_batch_3", lambda e: {**e, b"data": e[b"data"].astype(np.int16)}, "its 'data' is a int16 array"),
    ("data_batch_4", lambda e: {b"labels": e[b"labels"]}, "its 'data' is missing"),
    ("test_batch", lambda e: {**e, b"labels": [1, 10]}, "is corrupt: it holds label 10, outside CIFAR-10's 0..9"),
    ("data_batch_5", lambda e: list(e), "is not a CIFAR-10 batch: it holds a list, expected a dict"),
    ("batches.meta", lambda e: {b"num_vis": 3072}, "is not CIFAR-10's batches.meta: 'label_names' should be"),
])
def test_bad_cifar_batch_is_the_runs_error(tmp_path, victim, change, expected):
    write_cifar(tmp_path)
    f = tmp_path / "cifar-10-batches-py" / victim
    _rewrite(f, change)
    line = same_error(tmp_path, "cifar10")
    assert line.startswith(str(f)) and expected in line


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar_batch_that_would_run_code_is_refused_unrun(tmp_path, protocol):
    write_cifar(tmp_path)
    marker = tmp_path / "pwned"
    f = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    f.write_bytes(pickle.dumps({"data": RunsCommand(f"touch {marker}"), "labels": [1]}, protocol=protocol))
    assert "is refused: the pickle asks for" in same_error(tmp_path, "cifar10") and not marker.exists()


def test_truncated_cifar_batch(tmp_path):
    """Cut inside its bytes: the same line, but for the cause each reader gives in parentheses."""
    write_cifar(tmp_path)
    f = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    f.write_bytes(f.read_bytes()[:-40])
    with pytest.raises(DataError) as checked:
        check_dataset(DataConfig(name="cifar10", root=str(tmp_path)), seed=0)
    with pytest.raises(DataError) as loaded:
        load_dataset("cifar10", tmp_path)
    clear_cache()
    for err in (checked, loaded):
        assert str(err.value).startswith(f"{f} is truncated or corrupt: not a readable pickle (")
        assert str(err.value).endswith(f"; {f.stat().st_size} bytes)") and "\n" not in str(err.value)


@pytest.mark.parametrize("damage, expected", [
    (lambda f: (f.unlink(), f.mkdir()), "cannot read CINIC-10 image"),
    (lambda f: f.write_bytes(b"not a png at all, just text"), "is truncated or corrupt: PIL cannot decode it"),
    (lambda f: Image.fromarray(np.zeros((64, 48, 3), np.uint8)).save(f, format="png"), "is 48x64, expected 32x32"),
])
def test_bad_cinic_png_is_the_runs_error(tmp_path, damage, expected):
    write_cinic(tmp_path, "train"), write_cinic(tmp_path, "test")
    f = tmp_path / "cinic10" / "test" / "ship" / "cifar10-test-1.png"  # the last of its class
    damage(f)
    line = same_error(tmp_path, "cinic10")
    assert str(f) in line and expected in line


def test_bad_femnist_file_is_the_runs_error(tmp_path):
    write_leaf(tmp_path)
    f = next((tmp_path / "femnist" / "test").glob("*.json"))
    f.write_text(f.read_text()[:-30])
    assert same_error(tmp_path, "femnist").startswith(f"FEMNIST file {f} is not valid JSON: ")


def test_a_gzipped_idx_file_past_two_copy_buffers_is_counted_whole(tmp_path):
    """data/idx.py peek_idx counts a ``.gz`` by streaming it through shutil.copyfileobj, COPY_BUFSIZE (64 KiB on
    Linux) bytes a write: the header is the first write's, the size the sum of all (MNIST's 47 MB are 718)."""
    import shutil
    from seafl_dist.data.idx import peek_idx
    n = 2 * shutil.COPY_BUFSIZE // 784 + 3  # 28x28 bytes an image: past two buffers
    path = tmp_path / "train-images-idx3-ubyte"
    write_idx(path, random_images(n, 28, 28), gz=True)
    assert not path.exists() and peek_idx(path, 3) == (n, 28, 28)
    cut = gzip.decompress(path.with_name(path.name + ".gz").read_bytes())[:-40]
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(cut))
    with pytest.raises(DataError, match=rf"is truncated: header says {n} images of 28x28 \({16 + 784 * n} bytes\), "
                                        rf"file has {16 + 784 * n - 40}$"):
        peek_idx(path, 3)
