"""Load the paper's datasets from the formats they are distributed in, once per process.

    ds = load_dataset("mnist", root="data", train=True)            # ArrayDataset
    ds = load_dataset("emnist", root="data", emnist_split="letters")
    ds = load_dataset("cinic10", root="data", train=False)

Where each dataset is looked for (``root`` is ``data.root``):

===========  ==================================================================  =================
name         files                                                               via
===========  ==================================================================  =================
digits       bundled with scikit-learn (1,797 8x8 digits), nothing on disk        own CSV reader
mnist        root/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte          own IDX reader
emnist       root/EMNIST/raw/emnist-<split>-{train,test}-{images-idx3,labels-     own IDX reader
             idx1}-ubyte
cifar10      root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta} own safe unpickler
cinic10      root/{cinic10,CINIC-10,.}/{train,test}/<class>/*.png (``valid/``     own PNG reader
             is not used); the first of the three that holds the split
femnist      root/{femnist,femnist/data}/{train,test}/*.json (LEAF's format)     own JSON reader
shakespeare  root/{shakespeare,shakespeare/data}/{train,test}/*.json (LEAF's     own JSON reader
             format); samples: 80 character ids, the label the next one's id
===========  ==================================================================  =================

Choices, so that they are written down:

- IDX files may also sit there gzipped (``*.gz``, as the mirrors serve them); they are
  decompressed in place on first use. Downloads go through torchvision; files on disk are read
  directly (torchvision's import costs every torchrun rank ~1.7 s of CPU at start-up).
- EMNIST's IDX files store every image transposed; the loader transposes it back so letters read
  upright. ``letters`` labels are 1..26 (torchvision's class 0 is "N/A"), hence 27 classes.
- CIFAR-10 batches are read with our own unpickler (:mod:`seafl_dist.data.safepickle`: plain data
  and numpy arrays only, so a tampered file cannot run code) in torchvision's layout, without the
  MD5 check torchvision makes, so re-packed or subsetted copies load (pickled as the originals, by
  Python 2, or by Python 3 at protocol 3 or later); a download (``download=True``) goes through
  torchvision and is checksummed.
- Every file is checked as it is read (IDX sizes against their header, image and label counts,
  label ranges, CIFAR's fields, CINIC's PNGs): a truncated or corrupt file raises
  :class:`DataError`, one line naming the file and what is wrong with it.
- CINIC-10 uses ``train/`` for training (90,000 images) and ``test/`` for testing; ``valid/`` is
  ignored, as in most FL papers. The first load decodes the PNGs in threads and writes
  ``<that folder>/.<split>.seafl-cache.npz`` (uint8 arrays, keyed by the file list), which later
  loads and other ranks read instead; a read-only root just skips the cache.
- digits has no official split: a stratified hold-out of ``test_fraction``, seeded by ``seed``
  (scikit-learn ``train_test_split``'s rows, computed in :mod:`.digits` without importing
  scikit-learn, whose import costs each process seconds); train and test for one (seed, fraction) are disjoint and
  cover the 1,797 images. Images are upscaled once to 28x28 (bilinear) so LeNet-5 fits them.

A missing dataset with ``download=False`` raises :class:`DatasetNotFoundError`, naming the
dataset, the path searched, the files expected and how to get them. Loaded datasets are kept in
a per-process cache keyed by the arguments that matter, so the server and every in-process
worker share one copy (:func:`clear_cache` empties it).
"""
from __future__ import annotations

from pathlib import Path
from urllib.error import URLError

import numpy as np
import torch

from ..settings.errors import ConfigError
from ..settings.plugins import is_import_path
from ..settings.data import HF
from .custom import load_custom_dataset
from .hf import clear as _clear_hf, load_hf
from .datamodule import clear as _clear_datamodules, is_datamodule_path, load_split
from .cifar import load_cifar10
from .cinic import CINIC_CLASSES, load_cinic10  # noqa: F401  (CINIC_CLASSES: re-exported)
from .dataset import NORMALIZATION, ArrayDataset
from .femnist import load_femnist
from .digits import read_digits, stratified_split
from .shakespeare import load_shakespeare
from .idx import gunzip_missing, read_pair
from .missing import DataError, DatasetNotFoundError, not_found as _not_found  # noqa: F401  (re-exported)

DATASETS = ("digits", "mnist", "emnist", "cifar10", "cinic10", "femnist", "shakespeare")
_CACHE: dict[tuple, ArrayDataset] = {}


def load_dataset(name: str, root: str | Path = "data", train: bool = True, *, download: bool = False,
                 seed: int = 0, test_fraction: float = 0.2, emnist_split: str = "balanced",
                 files: dict | None = None, columns: dict | None = None, splits: dict | None = None) -> ArrayDataset:
    """The train (``train=True``) or test split of dataset ``name`` as an :class:`ArrayDataset`,
    cached per process. ``seed`` / ``test_fraction`` matter for digits only, ``emnist_split`` for
    emnist only, ``files`` / ``columns`` / ``splits`` for ``hf:<path>`` only (data/hf.py)."""
    root = Path(root).expanduser().resolve()
    if name.startswith(HF):  # a Hugging Face dataset (data/hf.py); the test split's labels use train's classes
        hf = dict(files=files, columns=columns, splits=splits)
        key = (name, bool(train), str(root), repr(hf))
        if key not in _CACHE:
            classes = None if train else load_dataset(name, root, train=True, **hf).num_classes
            _CACHE[key] = load_hf(name, root, train, **hf, num_classes=classes)
        return _CACHE[key]
    if is_import_path(name) and is_datamodule_path(name):  # a LightningDataModule (data/datamodule.py)
        return load_split(name, root, train, seed=seed, prepare=download)
    if is_import_path(name):  # a user's loader (seafl_dist.data.custom); the test split's labels use train's classes
        key = (name, bool(train), str(root))
        if key not in _CACHE:
            classes = None if train else load_dataset(name, root, train=True).num_classes
            _CACHE[key] = load_custom_dataset(name, root, train, classes)
        return _CACHE[key]
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}, or an import path pkg.module:fn")
    key: tuple = (name, bool(train))
    if name == "digits":
        key += (int(seed), float(test_fraction))
    else:
        key += (str(root),) + ((emnist_split,) if name == "emnist" else ())
    if key not in _CACHE:
        if name == "digits":
            _CACHE[key] = _load_digits(train, seed, test_fraction)
        elif name == "mnist":
            _CACHE[key] = _load_mnist(root, train, download)
        elif name == "emnist":
            _CACHE[key] = _load_emnist(root, train, download, emnist_split)
        elif name == "cifar10":
            _CACHE[key] = load_cifar10(root, train, download)
        elif name == "femnist":  # LEAF's JSON files, by writer (data/femnist.py)
            _CACHE[key] = load_femnist(root, train, download)
        elif name == "shakespeare":  # LEAF's JSON files, by role; token sequences (data/shakespeare.py)
            _CACHE[key] = load_shakespeare(root, train, download)
        else:
            _CACHE[key] = load_cinic10(root, train, download)
    return _CACHE[key]


def clear_cache() -> None:
    """Forget every loaded dataset and DataModule (tests; or to free memory)."""
    _CACHE.clear()
    _clear_datamodules()
    _clear_hf()


# ---- digits (bundled) -------------------------------------------------------------------

def digits_split(labels: np.ndarray, seed: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) row indices: a stratified hold-out of ``test_fraction``, seeded
    (scikit-learn ``train_test_split``'s rows, computed without importing it: :mod:`.digits`)."""
    return stratified_split(labels, seed, test_fraction)


def _load_digits(train: bool, seed: int, test_fraction: float) -> ArrayDataset:
    pixels, labels = read_digits()
    x = torch.tensor(pixels, dtype=torch.float32).unsqueeze(1) / 16.0  # values 0..16
    x = torch.nn.functional.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    images = (x * 255).round().clamp(0, 255).to(torch.uint8)
    scaled = images.to(torch.float64) / 255  # statistics of all 1,797 images (no labels involved)
    mean, std = (float(scaled.mean()),), (float(scaled.std()),)
    tr, te = digits_split(labels, seed, test_fraction)
    rows = torch.from_numpy(tr if train else te)
    return ArrayDataset(images[rows].contiguous(), torch.from_numpy(labels)[rows], 10, "digits", mean, std,
                        [str(d) for d in range(10)])


# ---- MNIST / EMNIST (IDX files read here, downloads via torchvision) ---------------------

def _via_torchvision(make, name: str, where: Path, expected: list[str], how: str):
    """Download with a torchvision dataset; a failed download becomes DatasetNotFoundError."""
    try:
        return make()
    except (RuntimeError, OSError, URLError) as err:
        raise _not_found(name, where, expected, how, cause=str(err)) from err


def _idx_split(raw: Path, expected: list[str], prefix: str, num_classes: int, name: str, how: str, download, fetch):
    """(images, labels) of one split: read from ``raw`` if its files are there, else via ``fetch()``."""
    gunzip_missing(raw, expected)
    if not all((raw / f).exists() for f in expected):
        if not download:
            raise _not_found(name, raw, expected, how)
        _via_torchvision(fetch, name, raw, expected, how)  # torchvision leaves the IDX files in raw/
        gunzip_missing(raw, expected)
    return read_pair(raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte", num_classes)


def _load_mnist(root: Path, train: bool, download: bool) -> ArrayDataset:
    raw = root / "MNIST" / "raw"
    expected = [f"{p}-{kind}-ubyte" for p in ("train", "t10k") for kind in ("images-idx3", "labels-idx1")]
    mirror = "https://ossci-datasets.s3.amazonaws.com/mnist/"
    how = (f"download the four files {', '.join(f + '.gz' for f in expected)} from {mirror} into {raw} "
           f"(gzipped or not)")

    def fetch():
        from torchvision.datasets import MNIST
        return MNIST(str(root), train=train, download=True)

    images, labels = _idx_split(raw, expected, "train" if train else "t10k", 10, "mnist", how, download, fetch)
    return ArrayDataset(images.unsqueeze(1).contiguous(), labels, 10, "mnist", *NORMALIZATION["mnist"],
                        [str(d) for d in range(10)])


def _load_emnist(root: Path, train: bool, download: bool, split: str) -> ArrayDataset:
    from torchvision.datasets import EMNIST

    if split not in EMNIST.splits:
        raise ConfigError(f"config key 'data.emnist_split' has value {split!r}; allowed: {', '.join(EMNIST.splits)}")
    raw = root / "EMNIST" / "raw"
    prefix = f"emnist-{split}-{'train' if train else 'test'}"
    expected = [f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"]
    how = (f"download {EMNIST.url}, unzip it and copy gzip/{prefix}-*-ubyte.gz into {raw} (gzipped or not)")
    classes = list(EMNIST.classes_split_dict[split])
    images, labels = _idx_split(raw, expected, prefix, len(classes), "emnist", how, download,
                                lambda: EMNIST(str(root), split=split, train=train, download=True))
    images = images.transpose(1, 2).unsqueeze(1).contiguous()  # the IDX files hold each image transposed
    return ArrayDataset(images, labels, len(classes), f"emnist-{split}", *NORMALIZATION["emnist"], classes)
