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

Choices, so that they are written down:

- Files are read one at a time in name order and, inside a file, each writer's samples are turned
  into uint8 (``round(x * 255)``, which gives back LEAF's bytes exactly) while the JSON parser is
  still building the file (``object_hook``): at most one writer's samples exist as Python floats
  (full FEMNIST as floats would be ~20 GB; as uint8 it is 640 MB). A file's text is held while it
  is parsed (LEAF's largest are a few hundred MB).
- The writers are those listed in ``users``, in file order; ``user_data`` may hold others (LEAF's
  by-sample split leaves writers with < 2 samples there, empty): they are skipped, as is a listed
  writer with no sample. A writer listed in two files of one split is an error.
- No normalisation (mean 0, std 1), as LEAF's reference models feed [0, 1] pixels.
- The first load writes ``<folder>/.<split>.seafl-cache.npz`` (uint8 images, labels, writers),
  keyed by the names, sizes and modification times of the JSON files; later loads and other ranks
  read it instead. A read-only folder just skips the cache.

A file that is missing, not JSON, or not in this format stops the run with one line naming the
file, the writer and what is wrong (:class:`DataFormatError`, printed by the CLI without a traceback).
"""
from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .dataset import ArrayDataset, save_cache
from .missing import DataError, DatasetNotFoundError

PIXELS = 28 * 28
CLASSES = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)  # LEAF's label order, 62
FEMNIST_DIRS = ("femnist", "femnist/data")  # under data.root, searched in this order
LEAF_URL = "https://github.com/TalwalkarLab/leaf/tree/master/data/femnist"


class DataFormatError(DataError):
    """A dataset file that is there but cannot be used: the message names the file and what is wrong."""


@dataclass(eq=False, repr=False)  # ArrayDataset's short repr, not every writer's name
class WriterDataset(ArrayDataset):
    """An :class:`ArrayDataset` whose rows are grouped by writer: writer ``i`` (named ``writers[i]``)
    holds rows ``offsets[i]:offsets[i + 1]``. ``data.partition: natural`` makes each writer a device."""

    writers: list[str] = field(default_factory=list)
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))

    def writer_rows(self, i: int) -> np.ndarray:
        return np.arange(self.offsets[i], self.offsets[i + 1], dtype=np.int64)


def load_femnist(root: Path, train: bool, download: bool = False, *, write_cache: bool = True) -> WriterDataset:
    """The train or test split of FEMNIST under ``root`` (``data.root``); see the module doc.
    ``write_cache=False`` (the dry run) reads a fresh cache but never writes one."""
    split = "train" if train else "test"
    base = femnist_folder(root, download)
    files = _json_files(base / split)
    stamp = "\n".join(f"{f.name} {f.stat().st_size} {f.stat().st_mtime_ns}" for f in files)
    fingerprint = hashlib.sha1(stamp.encode()).hexdigest()
    cache = base / f".{split}.seafl-cache.npz"
    loaded = _read_cache(cache, fingerprint)
    if loaded is None:
        loaded = _read_split(files)
        images, labels, writers, offsets = loaded
        if write_cache:
            save_cache(cache, fingerprint=np.array(fingerprint), images=images, labels=labels,
                        writers=np.array(writers, dtype=str), offsets=offsets)
    images, labels, writers, offsets = loaded
    if len(labels) == 0:
        raise DataFormatError(f"the FEMNIST {split} files in {base / split} hold no sample (every writer is empty)")
    return WriterDataset(torch.from_numpy(images).view(-1, 1, 28, 28), torch.from_numpy(labels), len(CLASSES),
                         "femnist", (0.0,), (1.0,), list(CLASSES), writers=list(writers), offsets=offsets)


def femnist_folder(root: Path, download: bool = False) -> Path:
    """The first of ``root``'s FEMNIST_DIRS with both splits' JSON files; else DatasetNotFoundError, saying how to make them."""
    bases = [root / d for d in FEMNIST_DIRS]
    base = next((b for b in bases if all(_json_files(b / s) for s in ("train", "test"))), None)
    if base is None:
        raise DatasetNotFoundError(
            f"dataset 'femnist' not found: searched {', '.join(str(b) for b in bases)}; expected train/*.json and "
            f"test/*.json (LEAF's JSON format) in one of them. LEAF publishes no ready-made files"
            f"{' (data.download cannot fetch it)' if download else ''}: generate them with LEAF's scripts ({LEAF_URL}: "
            f"cd leaf/data/femnist && ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample) and set data.root to leaf/data, "
            f"or copy its data/train and data/test folders into {bases[0]}")
    return base


def _json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []


def _read_cache(path: Path, fingerprint: str):
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            if str(z["fingerprint"]) != fingerprint:
                return None
            images, labels, writers, offsets = z["images"], z["labels"], [str(w) for w in z["writers"]], z["offsets"]
    except (OSError, ValueError, KeyError, EOFError):
        return None  # unreadable cache (ours, derived data): parse the JSON again
    whole = (images.dtype == np.uint8 and images.shape[1:] == (PIXELS,) and labels.shape == (len(images),)
             and offsets.shape == (len(writers) + 1,) and offsets[-1] == len(images))
    return (images, labels, writers, offsets) if whole else None


def _read_split(files: list[Path]) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Every file's writers, in file order, as (images (n, 784) uint8, labels, writers, offsets)."""
    images = np.empty((0, PIXELS), dtype=np.uint8)
    labels, writers, sizes, seen = [], [], [], {}
    for path in files:
        xs = []
        for name, x, y in read_leaf_file(path):
            if name in seen:
                raise DataFormatError(f"{path}: writer {name!r} is also in {seen[name]}; a writer may appear in "
                                      "one file of a split only")
            seen[name] = path.name
            if len(y):
                writers.append(name)
                sizes.append(len(y))
                xs.append(x)
                labels.append(y)
        if xs:  # grown in place (realloc; on Linux a remap, not a copy): the set is never held twice
            start = len(images)
            chunk = np.concatenate(xs)
            images.resize((start + len(chunk), PIXELS), refcheck=False)
            images[start:] = chunk
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    return images, np.concatenate(labels) if labels else np.zeros(0, dtype=np.int64), writers, offsets


@dataclass
class _Samples:
    """One writer's ``{"x", "y"}`` as the parser hands it over: converted, or what is wrong with it."""
    x: np.ndarray | None
    y: np.ndarray | None
    problem: str | None = None


def _convert(obj: dict):
    """``object_hook``: a writer's ``{"x": [...], "y": [...]}`` becomes uint8 images and int64
    labels at once, so its floats are freed before the parser reads the next writer."""
    if set(obj) != {"x", "y"} or not isinstance(obj["x"], list) or not isinstance(obj["y"], list):
        return obj
    xs, ys = obj["x"], obj["y"]
    if len(xs) != len(ys):
        return _Samples(None, None, f"has {len(xs)} images in x but {len(ys)} labels in y")
    for j, row in enumerate(xs):
        if not isinstance(row, list) or len(row) != PIXELS:
            got = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
            return _Samples(None, None, f"sample {j}: x has {got}, expected {PIXELS} (a flattened 28x28 image)")
    for j, label in enumerate(ys):
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(CLASSES):
            return _Samples(None, None, f"sample {j}: label {label!r} is not an integer in 0..{len(CLASSES) - 1}")
    try:
        x = np.array(xs, dtype=np.float64).reshape(len(xs), PIXELS)
    except (TypeError, ValueError):
        return _Samples(None, None, "x holds a value that is not a number")
    bad = ~((x >= 0) & (x <= 1))  # NaN fails both
    if bad.any():
        j, p = map(int, np.argwhere(bad)[0])
        return _Samples(None, None, f"sample {j}: pixel {p} is {float(x[j, p])!r}, outside [0, 1]")
    return _Samples(np.rint(x * 255).astype(np.uint8), np.array(ys, dtype=np.int64))


def read_leaf_file(path: Path):
    """``(writer, images (n, 784) uint8, labels (n,) int64)`` for each writer listed in ``users``."""
    try:
        with open(path, encoding="utf-8") as fh:  # text mode: the file is held once, as str, not also as bytes
            data = json.load(fh, object_hook=_convert)
    except OSError as err:
        raise DataFormatError(f"cannot read FEMNIST file {path}: {err.strerror or err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DataFormatError(f"FEMNIST file {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise DataFormatError(f"FEMNIST file {path} holds a JSON {type(data).__name__}, expected an object with "
                              "users, num_samples and user_data (LEAF's format)")
    missing = [k for k in ("users", "num_samples", "user_data") if k not in data]
    if missing:
        raise DataFormatError(f"FEMNIST file {path} has no {', '.join(missing)} (LEAF's format has users, "
                              "num_samples and user_data)")
    users, counts, user_data = data["users"], data["num_samples"], data["user_data"]
    if not isinstance(users, list) or not isinstance(counts, list) or len(users) != len(counts):
        raise DataFormatError(f"FEMNIST file {path}: users and num_samples must be lists of one length")
    if not isinstance(user_data, dict):
        raise DataFormatError(f"FEMNIST file {path}: user_data must be an object keyed by writer")
    for name, count in zip(users, counts):
        samples = user_data.get(name) if isinstance(name, str) else None
        if not isinstance(samples, _Samples):
            raise DataFormatError(f"FEMNIST file {path}, writer {name!r}: no {{x, y}} entry in user_data")
        if samples.problem:
            raise DataFormatError(f"FEMNIST file {path}, writer {name!r}: {samples.problem}")
        if count != len(samples.y):
            raise DataFormatError(f"FEMNIST file {path}, writer {name!r}: num_samples says {count} but user_data "
                                  f"holds {len(samples.y)}")
        yield name, samples.x, samples.y
