"""Shakespeare from LEAF's JSON files: next-character prediction, grouped by role (a speaking part of a play).

    train = load_shakespeare(Path("data"), train=True)   # a WriterDataset of (n, 80) uint8 character ids
    train.writer_rows(3)                                  # the rows of role 3 (train.writers[3] names it)

LEAF (github.com/TalwalkarLab/leaf, ``data/shakespeare``) publishes no ready-made files: its
``preprocess.sh`` downloads the complete works from Project Gutenberg, cuts each role's lines into
samples and writes ``data/train/*.json`` and ``data/test/*.json``, each file ``{"users": [role, ...],
"num_samples": [...], "user_data": {role: {"x": ["80 characters", ...], "y": ["the next character",
...]}}}`` (and ``hierarchies``, not read). With ``-t sample`` every role's samples are split between
train and test (``--tf 0.8``: 80 % train, as the FedAvg paper), so a role's test samples are its own
held-out data (``data.device_test: writers``). Looked for, under ``data.root``, in the first of
``shakespeare/`` and ``shakespeare/data/`` (LEAF's own tree: then ``data.root`` is ``leaf/data``).
The envelope, the roles (LEAF's users, called writers in :mod:`.leaf`) and the cache are read as
FEMNIST's are (:mod:`.leaf`).

Choices, so that they are written down:

- A character's id is its position in LEAF's ``ALL_LETTERS`` (models/utils/language_utils.py, 80
  characters), as LEAF's ``word_to_indices`` and ``letter_to_vec`` make them, so ids and labels
  are LEAF's and 80 classes. Samples are ``(n, 80)`` uint8 ids (the whole set ~340 MB, not 2.7 GB
  as int64); batches hand them over as int64.
- A character not in ``ALL_LETTERS`` refuses the file, in one line naming the file, the role, the
  sample and the character. LEAF's ``find`` gives such a character -1, which its reference model
  cannot use either: as a label, Python's negative index makes it the last class (``}``); as an
  input, an embedding lookup of -1 (an error on TensorFlow's CPU, a zero vector on its GPU). Any
  id chosen for it here would be a guess that silently trains on something LEAF never defined.
- ``x`` must be strings of exactly 80 characters and ``y`` single characters, as LEAF writes them.
- No normalisation and no augmentation (``data.augment`` is refused): the samples are ids.

A file that is missing, not JSON, or not in this format stops the run with one line naming the
file, the role and what is wrong (:class:`DataFormatError`, printed by the CLI without a traceback).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .leaf import DataFormatError, Samples, WriterDataset, is_samples, leaf_folder, load_split, read_leaf_json

ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"  # LEAF's, in order
SEQ_LEN = 80  # characters of context per sample (LEAF's seq_len)
SHAKESPEARE_DIRS = ("shakespeare", "shakespeare/data")  # under data.root, searched in this order
RECIPE = "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample -tf 0.8"
_UNKNOWN = 255
_IDS = np.full(128, _UNKNOWN, dtype=np.uint8)  # every ALL_LETTERS character is ASCII
_IDS[[ord(c) for c in ALL_LETTERS]] = np.arange(len(ALL_LETTERS), dtype=np.uint8)
__all__ = ["ALL_LETTERS", "DataFormatError", "SEQ_LEN", "load_shakespeare", "read_shakespeare_file",
           "shakespeare_folder"]


def load_shakespeare(root: Path, train: bool, download: bool = False, *, write_cache: bool = True) -> WriterDataset:
    """The train or test split of Shakespeare under ``root`` (``data.root``); see the module doc.
    ``write_cache=False`` (the dry run) reads a fresh cache but never writes one."""
    split = "train" if train else "test"
    ids, labels, roles, offsets = load_split(shakespeare_folder(root, download), split,
                                             lambda p: read_shakespeare_file(p), (SEQ_LEN,), np.uint8, "Shakespeare",
                                             write_cache, who="role")
    return WriterDataset(torch.from_numpy(ids), torch.from_numpy(labels), len(ALL_LETTERS), "shakespeare", (), (),
                         list(ALL_LETTERS), len(ALL_LETTERS), writers=list(roles), offsets=offsets)


def shakespeare_folder(root: Path, download: bool = False) -> Path:
    """The first of ``root``'s SHAKESPEARE_DIRS with both splits' JSON files; else DatasetNotFoundError, saying
    how to make them."""
    return leaf_folder(root, "shakespeare", SHAKESPEARE_DIRS, RECIPE, download)


def encode(text: str) -> np.ndarray:
    """The ids of ``text``'s characters (``_UNKNOWN`` for one not in ALL_LETTERS), in one vectorised lookup."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    return np.where(codes < 128, _IDS[np.minimum(codes, 127)], _UNKNOWN).astype(np.uint8)


def _convert(obj: dict):
    """``object_hook``: a role's ``{"x": [...], "y": [...]}`` becomes uint8 ids and int64 labels at once."""
    if not is_samples(obj):
        return obj
    xs, ys = obj["x"], obj["y"]
    if len(xs) != len(ys):
        return Samples.bad(f"has {len(xs)} samples in x but {len(ys)} labels in y")
    for j, s in enumerate(xs):
        if not isinstance(s, str) or len(s) != SEQ_LEN:
            got = f"{len(s)} characters" if isinstance(s, str) else f"a {type(s).__name__}"
            return Samples.bad(f"sample {j}: x is {got}, expected a string of {SEQ_LEN}")
    for j, c in enumerate(ys):
        if not isinstance(c, str) or len(c) != 1:
            return Samples.bad(f"sample {j}: y is {c!r}, expected one character")
    n = len(xs)
    ids = encode("".join(xs) + "".join(ys))
    unknown = np.flatnonzero(ids == _UNKNOWN)
    if unknown.size:
        p = int(unknown[0])
        j, where = (p // SEQ_LEN, f"x[{p % SEQ_LEN}]") if p < n * SEQ_LEN else (p - n * SEQ_LEN, "y")
        c = (xs[j][p % SEQ_LEN] if where != "y" else ys[j])
        return Samples.bad(f"sample {j}: {where} is {c!r}, not one of LEAF's {len(ALL_LETTERS)} characters "
                           "(ALL_LETTERS in its models/utils/language_utils.py), which have no id for it")
    return Samples(ids[:n * SEQ_LEN].reshape(n, SEQ_LEN), ids[n * SEQ_LEN:].astype(np.int64))


def read_shakespeare_file(path: Path):
    """``(role, ids (n, 80) uint8, labels (n,) int64)`` for each role listed in ``users``."""
    return read_leaf_json(path, _convert, "Shakespeare", who="role")
