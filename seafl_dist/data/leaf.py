"""What every LEAF dataset shares (github.com/TalwalkarLab/leaf): its JSON envelope, its split folders,
the rows grouped by writer and the decoded cache. :mod:`.femnist` and :mod:`.shakespeare` own only how
one writer's ``{"x": [...], "y": [...]}`` becomes arrays.

    base = leaf_folder(root, "femnist", ("femnist", "femnist/data"), recipe, download)
    samples, labels, writers, offsets = load_split(base, "train", read, (784,), np.uint8, "FEMNIST")

LEAF's ``preprocess.sh`` writes ``data/train/*.json`` and ``data/test/*.json``; each file is one
object ``{"users": [w, ...], "num_samples": [n_w, ...], "user_data": {w: {"x": [...], "y": [...]}}}``
(Shakespeare's also has ``hierarchies``, not read). A "writer" is LEAF's user: a FEMNIST writer, a
Shakespeare role. Choices, so that they are written down:

- Files are read one at a time in name order; inside a file, each writer's samples are converted by
  the dataset's ``convert`` while the JSON parser is still building the file (``object_hook``), so at
  most one writer's samples exist as Python objects. A file's text is held while it is parsed.
- The writers are those listed in ``users``, in file order; ``user_data`` may hold others (LEAF's
  by-sample split leaves writers with < 2 samples there, empty): they are skipped, as is a listed
  writer with no sample. A writer listed in two files of one split is an error.
- The first load writes ``<folder>/.<split>.seafl-cache.npz`` (samples, labels, writers, offsets),
  keyed by the names, sizes and modification times of the JSON files; later loads and other ranks
  read it instead. A read-only folder just skips the cache.

A file that is missing, not JSON, or not in this format stops the run with one line naming the
file, the writer and what is wrong (:class:`DataFormatError`, printed by the CLI without a traceback).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .dataset import ArrayDataset, save_cache
from .missing import DataError, DatasetNotFoundError


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


@dataclass
class Samples:
    """One writer's ``{"x", "y"}`` as a dataset's ``convert`` hands it over: arrays, or what is wrong with it."""
    x: np.ndarray | None
    y: np.ndarray | None
    problem: str | None = None

    @staticmethod
    def bad(problem: str) -> "Samples":
        return Samples(None, None, problem)


def is_samples(obj: dict) -> bool:
    """Whether a JSON object the parser just built is a writer's ``{"x": [...], "y": [...]}``."""
    return set(obj) == {"x", "y"} and isinstance(obj["x"], list) and isinstance(obj["y"], list)


def json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []


def leaf_folder(root: Path, name: str, dirs: tuple[str, ...], recipe: str, download: bool = False) -> Path:
    """The first of ``root``'s ``dirs`` with both splits' JSON files; else DatasetNotFoundError, saying how to
    make them (``recipe``: LEAF's command)."""
    bases = [root / d for d in dirs]
    base = next((b for b in bases if all(json_files(b / s) for s in ("train", "test"))), None)
    if base is None:
        url = f"https://github.com/TalwalkarLab/leaf/tree/master/data/{name}"
        raise DatasetNotFoundError(
            f"dataset '{name}' not found: searched {', '.join(str(b) for b in bases)}; expected train/*.json and "
            f"test/*.json (LEAF's JSON format) in one of them. LEAF publishes no ready-made files"
            f"{' (data.download cannot fetch it)' if download else ''}: generate them with LEAF's scripts ({url}: "
            f"cd leaf/data/{name} && {recipe}) and set data.root to leaf/data, "
            f"or copy its data/train and data/test folders into {bases[0]}")
    return base


def load_split(base: Path, split: str, read: Callable, shape: tuple, dtype, what: str, write_cache: bool = True,
               who: str = "writer") -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """``(samples (n, *shape) dtype, labels, writers, offsets)`` of ``base/split``: from the fresh cache, else
    parsed by ``read(path)`` (yielding ``(writer, x, y)``) and cached (not with ``write_cache=False``).
    ``what`` names the dataset and ``who`` its writers (``"role"``: Shakespeare) in the errors."""
    files = json_files(base / split)
    stamp = "\n".join(f"{f.name} {f.stat().st_size} {f.stat().st_mtime_ns}" for f in files)
    fingerprint = hashlib.sha1(stamp.encode()).hexdigest()
    cache = base / f".{split}.seafl-cache.npz"
    loaded = _read_cache(cache, fingerprint, shape, dtype)
    if loaded is None:
        loaded = _read_split(files, read, shape, dtype, who)
        samples, labels, writers, offsets = loaded
        if write_cache:
            save_cache(cache, fingerprint=np.array(fingerprint), images=samples, labels=labels,
                       writers=np.array(writers, dtype=str), offsets=offsets)
    if len(loaded[1]) == 0:
        raise DataFormatError(f"the {what} {split} files in {base / split} hold no sample (every {who} is empty)")
    return loaded


def _read_cache(path: Path, fingerprint: str, shape: tuple, dtype):
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            if str(z["fingerprint"]) != fingerprint:
                return None
            samples, labels, writers, offsets = z["images"], z["labels"], [str(w) for w in z["writers"]], z["offsets"]
    except (OSError, ValueError, KeyError, EOFError):
        return None  # unreadable cache (ours, derived data): parse the JSON again
    whole = (samples.dtype == dtype and samples.shape[1:] == shape and labels.shape == (len(samples),)
             and offsets.shape == (len(writers) + 1,) and offsets[-1] == len(samples))
    return (samples, labels, writers, offsets) if whole else None


def _read_split(files: list[Path], read: Callable, shape: tuple, dtype, who: str
                ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Every file's writers, in file order, as (samples, labels, writers, offsets)."""
    samples = np.empty((0, *shape), dtype=dtype)
    labels, writers, sizes, seen = [], [], [], {}
    for path in files:
        xs = []
        for name, x, y in read(path):
            if name in seen:
                raise DataFormatError(f"{path}: {who} {name!r} is also in {seen[name]}; a {who} may appear in "
                                      "one file of a split only")
            seen[name] = path.name
            if len(y):
                writers.append(name)
                sizes.append(len(y))
                xs.append(x)
                labels.append(y)
        if xs:  # grown in place (realloc; on Linux a remap, not a copy): the set is never held twice
            start = len(samples)
            chunk = np.concatenate(xs)
            samples.resize((start + len(chunk), *shape), refcheck=False)
            samples[start:] = chunk
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    return samples, np.concatenate(labels) if labels else np.zeros(0, dtype=np.int64), writers, offsets


def read_leaf_json(path: Path, convert: Callable, what: str, who: str = "writer"):
    """``(writer, x, y)`` for each writer listed in ``users`` of LEAF file ``path``; ``convert`` is the
    ``object_hook`` that turns a writer's ``{"x", "y"}`` into :class:`Samples`; ``what`` names the dataset,
    ``who`` its writers."""
    try:
        with open(path, encoding="utf-8") as fh:  # text mode: the file is held once, as str, not also as bytes
            data = json.load(fh, object_hook=convert)
    except OSError as err:
        raise DataFormatError(f"cannot read {what} file {path}: {err.strerror or err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DataFormatError(f"{what} file {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise DataFormatError(f"{what} file {path} holds a JSON {type(data).__name__}, expected an object with "
                              "users, num_samples and user_data (LEAF's format)")
    missing = [k for k in ("users", "num_samples", "user_data") if k not in data]
    if missing:
        raise DataFormatError(f"{what} file {path} has no {', '.join(missing)} (LEAF's format has users, "
                              "num_samples and user_data)")
    users, counts, user_data = data["users"], data["num_samples"], data["user_data"]
    if not isinstance(users, list) or not isinstance(counts, list) or len(users) != len(counts):
        raise DataFormatError(f"{what} file {path}: users and num_samples must be lists of one length")
    if not isinstance(user_data, dict):
        raise DataFormatError(f"{what} file {path}: user_data must be an object keyed by {who}")
    for name, count in zip(users, counts):
        samples = user_data.get(name) if isinstance(name, str) else None
        if not isinstance(samples, Samples):
            raise DataFormatError(f"{what} file {path}, {who} {name!r}: no {{x, y}} entry in user_data")
        if samples.problem:
            raise DataFormatError(f"{what} file {path}, {who} {name!r}: {samples.problem}")
        if count != len(samples.y):
            raise DataFormatError(f"{what} file {path}, {who} {name!r}: num_samples says {count} but user_data "
                                  f"holds {len(samples.y)}")
        yield name, samples.x, samples.y
