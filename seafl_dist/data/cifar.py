"""CIFAR-10 from its python batches (see loaders.py for where it is looked for).

Each batch is a Python 2 pickle of a dict: ``data`` (uint8, one row of 3072 bytes per image:
the R, G, B planes of 32x32), ``labels`` (ints 0..9), ``batch_label``, ``filenames``;
``batches.meta`` holds ``label_names``. They are read with :mod:`seafl_dist.data.safepickle`
(plain data and numpy arrays only: a tampered download cannot run code), and every field used is
checked, so a truncated or altered file is one line naming it and what is wrong.

:func:`check_batch` and :func:`check_meta` are those checks, on the unpickled object or on the
one the dry run's opcode walk records (:func:`~seafl_dist.data.safepickle.walk_pickle`), so the
dry run words every problem as the run does.
"""
from __future__ import annotations

from pathlib import Path
from urllib.error import URLError

import numpy as np
import torch

from .dataset import NORMALIZATION, ArrayDataset
from .missing import DataError, not_found
from .safepickle import NUMPY_ARRAYS, array_info, load_pickle

BASE = "cifar-10-batches-py"
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
TEST = ["test_batch"]
META = "batches.meta"
ROW = 3 * 32 * 32


def load_cifar10(root: Path, train: bool, download: bool) -> ArrayDataset:
    base = root / BASE
    batches = TRAIN if train else TEST
    expected = batches + [META]
    how = f"download {URL} and unpack it into {root} (tar xzf), which creates {base}"
    if not all((base / f).exists() for f in expected):
        if not download:
            raise not_found("cifar10", base, expected, how)
        from torchvision.datasets import CIFAR10
        try:
            CIFAR10(str(root), train=train, download=True)  # fetches, unpacks and checks MD5s
        except (RuntimeError, OSError, URLError) as err:
            raise not_found("cifar10", base, expected, how, cause=str(err)) from err
    parts = [read_batch(base / f) for f in batches]
    classes = read_meta(base / META)
    images = torch.from_numpy(np.concatenate([x for x, _ in parts]).reshape(-1, 3, 32, 32))  # one copy
    labels = torch.from_numpy(np.concatenate([y for _, y in parts]))
    return ArrayDataset(images, labels, 10, "cifar10", *NORMALIZATION["cifar10"], classes)


def _dict_of(path: Path, obj, wanted: str) -> dict:
    """The pickled dict with its keys as str (Python 2 str keys decode as str; bytes keys are decoded too)."""
    if not isinstance(obj, dict):
        raise DataError(f"{path} is not a CIFAR-10 {wanted}: it holds a {type(obj).__name__}, expected a dict")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images as rows of 3072 uint8, labels as int64) of one batch file, each field checked."""
    return check_batch(path, load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1"))


def check_batch(path: Path, obj) -> tuple[object, np.ndarray]:
    """(its ``data``, its labels as int64) of a batch's pickled object ``obj``, built or walked:
    ``data`` uint8 rows of 3072, one label in 0..9 per row."""
    entry = _dict_of(path, obj, "batch")
    data = entry.get("data")
    found = array_info(data)
    if found is None or found[0] != "uint8" or len(found[1]) != 2 or found[1][1] != ROW:
        what = (f"a {found[0]} array of shape {found[1]}" if found is not None
                else "missing" if data is None else f"a {type(data).__name__}")
        raise DataError(f"{path} is not a CIFAR-10 batch: its 'data' is {what}, expected uint8 rows of {ROW} "
                        f"bytes (32x32 RGB)")
    rows = found[1][0]
    raw = entry.get("labels", entry.get("fine_labels"))
    try:
        labels = np.asarray(raw, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        labels = None
    if labels is None or labels.ndim != 1 or len(labels) != rows:
        raise DataError(f"{path} is not a CIFAR-10 batch: {rows} images but 'labels' is "
                        f"{'missing' if raw is None else f'{type(raw).__name__} of {_len(raw)} entries'}, "
                        f"expected {rows} integers")
    bad = labels[(labels < 0) | (labels > 9)]
    if len(bad):
        raise DataError(f"{path} is corrupt: it holds label {int(bad[0])}, outside CIFAR-10's 0..9")
    return data, labels


def read_meta(path: Path) -> list[str]:
    """The ten class names of ``batches.meta``."""
    return check_meta(path, load_pickle(path, allow=NUMPY_ARRAYS, encoding="latin1"))


def check_meta(path: Path, obj) -> list[str]:
    """The ten class names of ``batches.meta``'s pickled object ``obj``, built or walked."""
    names = _dict_of(path, obj, "batches.meta").get("label_names")
    if not isinstance(names, list) or len(names) != 10 or not all(isinstance(n, (str, bytes)) for n in names):
        raise DataError(f"{path} is not CIFAR-10's batches.meta: 'label_names' should be a list of 10 class "
                        f"names, got {names!r:.80}")
    return [n.decode("latin1") if isinstance(n, bytes) else n for n in names]


def _len(obj) -> str:
    try:
        return str(len(obj))
    except TypeError:
        return "no"
