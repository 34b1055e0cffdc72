"""Check a dataset on disk without loading it: formats and sizes only (``seafl run --dry-run``).

    found = check_dataset(cfg.data, cfg.data_seed)   # a DataCheck: training labels, shape, classes, sizes

Where :func:`~seafl_dist.data.loaders.load_dataset` reads everything (and may download, gunzip an
IDX file in place or write CINIC-10's decoded cache), this reads only what a partition needs and
what proves the files are whole, and writes nothing:

- mnist / emnist: each IDX file's header, and its size against the shape the header announces
  (a gzipped file: its gzip trailer's length); the training labels are read (60 KB).
- cifar10: each batch's pickle opcodes are walked with :mod:`pickletools` (nothing is built or
  run), which finds a truncated file; the labels are taken from the ``labels`` list, and the
  ``data`` bytes must hold 3,072 per label.
- cinic10: the class folders are listed (the labels are the folders), and the first and last PNG
  of each class must have a PNG signature and a 32x32 header; the decoded cache is not built.
- digits and datasets named by import path are loaded as the run loads them (digits is bundled;
  a user's loader is the user's code, and calling it is the only way to check it).

A dataset missing from ``data.root`` with ``data.download=true`` is not fetched: the check says
the run will download it, and has no labels to partition.
"""
from __future__ import annotations

import gzip
import os
import pickletools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..settings import ConfigError
from ..settings.plugins import is_import_path
from .cinic import CINIC_CLASSES, CINIC_DIRS, _cinic_present, load_cinic10
from .missing import not_found

CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_TEST = ["test_batch"]
CIFAR_ROW = 3 * 32 * 32
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class BadDataError(ConfigError):
    """A dataset file that is there but cannot be what it claims (truncated, wrong format); one line."""


@dataclass
class DataCheck:
    """What :func:`check_dataset` found. ``labels`` is ``None`` when the run will download the set."""
    name: str
    where: str
    labels: np.ndarray | None = None
    num_classes: int = 0
    shape: tuple = ()  # (C, H, W) of one image
    n_test: int | None = None
    note: str = ""


def check_dataset(d, seed: int) -> DataCheck:
    """Check the dataset of the config section ``d`` (:class:`~seafl_dist.settings.DataConfig`); ``seed``
    is the data seed (digits' split depends on it)."""
    try:
        return _check(d, Path(d.root).expanduser().resolve(), seed)
    except OSError as err:
        if isinstance(err, FileNotFoundError) and not err.filename:  # DatasetNotFoundError: its own message
            raise
        raise BadDataError(f"{err.filename or d.root} cannot be read: {err.strerror or err}; check the path "
                           f"and its permissions (data.root={d.root})") from None


def _check(d, root: Path, seed: int) -> DataCheck:
    if is_import_path(d.name) or d.name == "digits":
        return _loaded(d, root, seed)
    if d.name == "mnist":
        return _idx_set("mnist", root / "MNIST" / "raw", "train", "t10k", 10, d.download)
    if d.name == "emnist":
        from torchvision.datasets import EMNIST  # the split names and classes, as the loader knows them
        if d.emnist_split not in EMNIST.splits:
            raise ConfigError(f"config key 'data.emnist_split' has value {d.emnist_split!r}; allowed: one of "
                              f"{', '.join(EMNIST.splits)}")
        prefix = f"emnist-{d.emnist_split}"
        return _idx_set("emnist", root / "EMNIST" / "raw", f"{prefix}-train", f"{prefix}-test",
                        len(EMNIST.classes_split_dict[d.emnist_split]), d.download)
    if d.name == "cifar10":
        return _cifar(root / "cifar-10-batches-py", d.download)
    return _cinic(root, d.download)


def _loaded(d, root: Path, seed: int) -> DataCheck:
    from .loaders import load_dataset
    common = dict(download=False, seed=seed, test_fraction=d.test_fraction, emnist_split=d.emnist_split)
    train = load_dataset(d.name, root, train=True, **common)
    test = load_dataset(d.name, root, train=False, **common)
    return DataCheck(train.name, "bundled with scikit-learn" if d.name == "digits" else "a user's loader",
                     train.labels.numpy(), train.num_classes, tuple(train.images.shape[1:]), len(test))


def _will_download(name: str, where: Path, missing: list[str], classes: int, shape: tuple) -> DataCheck:
    shown = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
    return DataCheck(name, str(where), num_classes=classes, shape=shape,
                     note=f"not on disk ({shown} missing); data.download=true: the run downloads it (not checked)")


# ---- IDX (MNIST, EMNIST) -------------------------------------------------------------------------

def _idx_set(name: str, raw: Path, train: str, test: str, classes: int, download: bool) -> DataCheck:
    files = {f"{p}-{kind}": raw / f"{p}-{kind}-ubyte" for p in (train, test) for kind in ("images-idx3", "labels-idx1")}
    missing = [p.name for p in files.values() if not p.exists() and not _gz(p).exists()]
    if missing:
        if download:
            return _will_download(name, raw, missing, classes, (1, 28, 28))
        raise not_found(name, raw, [p.name for p in files.values()],
                        f"put the files there (gzipped or not; see seafl_dist/data/loaders.py)")
    shapes = {key: _idx_shape(path, 3 if "images" in key else 1) for key, path in files.items()}
    for split in (train, test):
        n_img, n_lab = shapes[f"{split}-images-idx3"][0], shapes[f"{split}-labels-idx1"][0]
        if n_img != n_lab:
            raise BadDataError(f"{raw}: {split} has {n_img} images but {n_lab} labels; one of its files is "
                               f"from another set, re-download both")
    labels = np.frombuffer(_read(files[f"{train}-labels-idx1"])[8:], dtype=np.uint8).astype(np.int64)
    if labels.size and labels.max() >= classes:
        raise BadDataError(f"{files[f'{train}-labels-idx1']} holds label {labels.max()}, but {name} has "
                           f"{classes} classes; it is not this dataset's label file")
    _, h, w = shapes[f"{train}-images-idx3"]
    return DataCheck(name, str(raw), labels, classes, (1, h, w), shapes[f"{test}-images-idx3"][0])


def _gz(path: Path) -> Path:
    return path.with_name(path.name + ".gz")


def _read(path: Path) -> bytes:
    """The file's bytes (decompressed in memory when only its ``.gz`` is there)."""
    if path.exists():
        return path.read_bytes()
    try:
        return gzip.decompress(_gz(path).read_bytes())
    except (OSError, EOFError) as err:
        raise BadDataError(f"{_gz(path)} is not a whole gzip file ({err}); re-download it") from None


def _idx_shape(path: Path, ndim: int) -> tuple:
    """The shape an IDX file's header announces, after checking the file holds exactly that much."""
    shown = path if path.exists() else _gz(path)
    try:
        if path.exists():
            with open(path, "rb") as f:
                head = f.read(4 + 4 * ndim)
            size = path.stat().st_size
        else:
            with gzip.open(_gz(path), "rb") as f:
                head = f.read(4 + 4 * ndim)
            with open(_gz(path), "rb") as f:  # gzip's trailer: the uncompressed length mod 2**32
                f.seek(-4, os.SEEK_END)
                size = int.from_bytes(f.read(4), "little")
    except (OSError, EOFError) as err:
        raise BadDataError(f"{shown} cannot be read ({err}); re-download it") from None
    if len(head) < 4 + 4 * ndim or head[:4] != bytes([0, 0, 8, ndim]):
        raise BadDataError(f"{shown} is not an IDX file of {ndim}-d uint8 data (it starts {head[:4].hex()}); "
                           f"re-download it")
    shape = tuple(int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    want = 4 + 4 * ndim + int(np.prod(shape))
    if size != want % 2 ** 32:
        held = f"holds {size} bytes" if path.exists() else "is a gzip whose trailer gives another length"
        raise BadDataError(f"{shown} {held}, not the {want} its header announces for {shape}; it is truncated "
                           f"or damaged, re-download it")
    return shape


# ---- CIFAR-10 (pickled batches) ------------------------------------------------------------------

def _cifar(base: Path, download: bool) -> DataCheck:
    expected = CIFAR_TRAIN + CIFAR_TEST + ["batches.meta"]
    missing = [f for f in expected if not (base / f).exists()]
    if missing:
        if download:
            return _will_download("cifar10", base, missing, 10, (3, 32, 32))
        raise not_found("cifar10", base, expected, f"unpack cifar-10-python.tar.gz into {base.parent}")
    labels = np.concatenate([_cifar_batch(base / f) for f in CIFAR_TRAIN])
    _walk(base / "batches.meta")
    n_test = len(_cifar_batch(base / CIFAR_TEST[0]))
    return DataCheck("cifar10", str(base), labels, 10, (3, 32, 32), n_test)


def _walk(path: Path):
    """The pickle's opcodes and arguments, read without building any object; a cut file is an error."""
    try:
        with open(path, "rb") as f:
            yield from ((op.name, arg) for op, arg, _ in pickletools.genops(f))
    except (ValueError, EOFError, OSError) as err:
        raise BadDataError(f"{path} is not a whole pickle ({str(err).splitlines()[0][:100]}); it is truncated or "
                           f"damaged, re-download it") from None


def _cifar_batch(path: Path) -> np.ndarray:
    """A CIFAR batch's labels: the integers after the key ``labels``; its ``data`` must match them."""
    key, labels, data_bytes = None, [], 0
    for op, arg in _walk(path):
        if isinstance(arg, (str, bytes)) and len(arg) < 32:
            name = arg.decode("latin1") if isinstance(arg, bytes) else arg
            if name in ("batch_label", "labels", "fine_labels", "data", "filenames"):
                key = name
        elif key in ("labels", "fine_labels") and isinstance(arg, int) and ("INT" in op or "LONG" in op):
            labels.append(arg)
        elif key == "data" and isinstance(arg, (str, bytes, bytearray)):
            data_bytes = max(data_bytes, len(arg))
    if not labels or data_bytes != CIFAR_ROW * len(labels) or max(labels) >= 10 or min(labels) < 0:
        raise BadDataError(f"{path} is not a CIFAR-10 batch: {len(labels)} labels (0-9 expected) and "
                           f"{data_bytes} bytes of images ({CIFAR_ROW} per label expected); re-download it")
    return np.asarray(labels, dtype=np.int64)


# ---- CINIC-10 (folders of PNGs) ------------------------------------------------------------------

def _cinic(root: Path, download: bool) -> DataCheck:
    bases = [root / d if d else root for d in CINIC_DIRS]
    found = {split: next((b for b in bases if _cinic_present(b / split)), None) for split in ("train", "test")}
    if None in found.values():
        if download:
            missing = [f"{split}/" for split, base in found.items() if base is None]
            return _will_download("cinic10", bases[0], missing, 10, (3, 32, 32))
        load_cinic10(root, found["train"] is None, False)  # its own not-found error; nothing is written
    counts = {}
    for split, base in found.items():
        names = [sorted(e.name for e in os.scandir(base / split / c) if e.name.endswith(".png")) for c in CINIC_CLASSES]
        for c, files in zip(CINIC_CLASSES, names):
            for name in {files[0], files[-1]}:
                _png_32(base / split / c / name)
        counts[split] = [len(files) for files in names]
    labels = np.repeat(np.arange(10, dtype=np.int64), counts["train"])  # the loader's order: class, then file name
    cached = (found["train"] / ".train.seafl-cache.npz").exists()
    note = "" if cached else "no decoded cache yet: the run's first load decodes every PNG and writes it"
    return DataCheck("cinic10", str(found["train"]), labels, 10, (3, 32, 32), sum(counts["test"]), note)


def _png_32(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise BadDataError(f"CINIC-10 image {path} is not a PNG file; re-download the dataset")
    w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if (w, h) != (32, 32):
        raise BadDataError(f"CINIC-10 image {path} is {w}x{h}, expected 32x32")
