"""FEMNIST from LEAF's JSON files: 62 classes of 28x28 handwritten characters, grouped by writer.

    train = load_femnist(Path("data"), train=True)    # a WriterDataset: uint8 images + who wrote each
    train.writer_rows(3)                              # the rows of writer 3 (train.writers[3] names it)

LEAF (github.com/TalwalkarLab/leaf, ``data/femnist``) publishes no ready-made files: its
``preprocess.sh`` downloads NIST SD-19 and writes ``data/train/*.json`` and ``data/test/*.json``.
Each file is one JSON object ``{"users": [w, ...], "num_samples": [n_w, ...], "user_data": {w:
{"x": [[784 floats in [0, 1]], ...], "y": [labels 0..61, ...]}}}`` (``x`` a row-major 28x28 grey
image divided by 255; labels 0-9 digits, 10-35 upper case, 36-61 lower case). Looked for, under
``data.root``, in the first of ``femnist/`` and ``femnist/data/`` (LEAF's own tree: then
``data.root`` is ``leaf/data``) that has both a ``train/`` and a ``test/`` folder of ``*.json``.

Choices, so that they are written down (LEAF's envelope, the writers and the cache: :mod:`.leaf`):

- Each writer's samples are turned into uint8 (``round(x * 255)``, which gives back LEAF's bytes
  exactly) while the JSON parser is still building the file: at most one writer's samples exist as
  Python floats (full FEMNIST as floats would be ~20 GB; as uint8 it is 640 MB).
- No normalisation (mean 0, std 1), as LEAF's reference models feed [0, 1] pixels.
- The cache is ``<folder>/.<split>.seafl-cache.npz`` (uint8 images, labels, writers).

A file that is missing, not JSON, or not in this format stops the run with one line naming the
file, the writer and what is wrong (:class:`DataFormatError`, printed by the CLI without a traceback).
"""
from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import torch

from .leaf import DataFormatError, Samples, WriterDataset, is_samples, leaf_folder, load_split, read_leaf_json

PIXELS = 28 * 28
CLASSES = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)  # LEAF's label order, 62
FEMNIST_DIRS = ("femnist", "femnist/data")  # under data.root, searched in this order
RECIPE = "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample"
__all__ = ["CLASSES", "DataFormatError", "WriterDataset", "femnist_folder", "load_femnist", "read_leaf_file"]


def load_femnist(root: Path, train: bool, download: bool = False, *, write_cache: bool = True) -> WriterDataset:
    """The train or test split of FEMNIST under ``root`` (``data.root``); see the module doc.
    ``write_cache=False`` (the dry run) reads a fresh cache but never writes one."""
    split = "train" if train else "test"
    images, labels, writers, offsets = load_split(femnist_folder(root, download), split, lambda p: read_leaf_file(p),
                                                  (PIXELS,), np.uint8, "FEMNIST", write_cache)
    return WriterDataset(torch.from_numpy(images).view(-1, 1, 28, 28), torch.from_numpy(labels), len(CLASSES),
                         "femnist", (0.0,), (1.0,), list(CLASSES), writers=list(writers), offsets=offsets)


def femnist_folder(root: Path, download: bool = False) -> Path:
    """The first of ``root``'s FEMNIST_DIRS with both splits' JSON files; else DatasetNotFoundError, saying how to make them."""
    return leaf_folder(root, "femnist", FEMNIST_DIRS, RECIPE, download)


def _convert(obj: dict):
    """``object_hook``: a writer's ``{"x": [...], "y": [...]}`` becomes uint8 images and int64
    labels at once, so its floats are freed before the parser reads the next writer."""
    if not is_samples(obj):
        return obj
    xs, ys = obj["x"], obj["y"]
    if len(xs) != len(ys):
        return Samples.bad(f"has {len(xs)} images in x but {len(ys)} labels in y")
    for j, row in enumerate(xs):
        if not isinstance(row, list) or len(row) != PIXELS:
            got = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
            return Samples.bad(f"sample {j}: x has {got}, expected {PIXELS} (a flattened 28x28 image)")
    for j, label in enumerate(ys):
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(CLASSES):
            return Samples.bad(f"sample {j}: label {label!r} is not an integer in 0..{len(CLASSES) - 1}")
    try:
        x = np.array(xs, dtype=np.float64).reshape(len(xs), PIXELS)
    except (TypeError, ValueError):
        return Samples.bad("x holds a value that is not a number")
    bad = ~((x >= 0) & (x <= 1))  # NaN fails both
    if bad.any():
        j, p = map(int, np.argwhere(bad)[0])
        return Samples.bad(f"sample {j}: pixel {p} is {float(x[j, p])!r}, outside [0, 1]")
    return Samples(np.rint(x * 255).astype(np.uint8), np.array(ys, dtype=np.int64))


def read_leaf_file(path: Path):
    """``(writer, images (n, 784) uint8, labels (n,) int64)`` for each writer listed in ``users``."""
    return read_leaf_json(path, _convert, "FEMNIST")
