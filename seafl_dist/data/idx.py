"""IDX files (MNIST, EMNIST): read, checked against their header, gunzipped where needed.

An IDX file is a 4-byte magic (0, 0, 8 = uint8, ndim), ``ndim`` big-endian uint32 sizes, then
the bytes. :func:`read_pair` reads an images file and its labels file and checks what a cut
download or a mixed-up copy would break: sizes against the header, equal counts, 28x28 images,
labels below the class count. Each problem is a :class:`DataError` naming the file.
"""
from __future__ import annotations

import gzip
import os
import shutil
import zlib
from pathlib import Path

import numpy as np
import torch

from .missing import DataError, read_bytes

GZIP_MAGIC = b"\x1f\x8b"


def gunzip_missing(folder: Path, files: list[str]) -> None:
    """Decompress ``f.gz`` to ``f`` for each missing ``f`` whose gzip is there (atomic rename)."""
    for f in files:
        target, packed = folder / f, folder / (f + ".gz")
        if target.exists() or not packed.exists():
            continue
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        try:
            with gzip.open(packed, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError
            tmp.unlink(missing_ok=True)
            if isinstance(err, OSError) and not isinstance(err, gzip.BadGzipFile) and err.errno is not None:
                raise DataError(f"cannot decompress {packed} into {folder}: {err.strerror or err}") from None
            raise DataError(f"{packed} is truncated or corrupt: gzip cannot decompress it ({err})") from None
        os.replace(tmp, target)


def _describe(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"{shape[0]} labels"
    return f"{shape[0]} images of {'x'.join(map(str, shape[1:]))}"


def read_idx(path: Path, ndim: int) -> torch.Tensor:
    """An uint8 IDX file (magic 0x0000080<ndim>, big-endian sizes) as a tensor, read as torchvision does."""
    data = read_bytes(path)
    header = 4 + 4 * ndim
    if data[:2] == GZIP_MAGIC:
        raise DataError(f"{path} is gzip-compressed but not named .gz: rename it to {path.name}.gz (it is "
                        f"decompressed on first use) or gunzip it")
    if len(data) < 4 or data[:4] != bytes([0, 0, 8, ndim]):
        raise DataError(f"{path} is not an IDX file of {ndim}-d uint8 data: it starts with bytes "
                        f"{data[:4].hex() or '(none: the file is empty)'}, expected 0000080{ndim}")
    if len(data) < header:
        raise DataError(f"{path} is truncated: {len(data)} bytes, shorter than its {header}-byte header")
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    want = header + int(np.prod(shape, dtype=np.int64))
    if len(data) != want:
        state = "truncated" if len(data) < want else "corrupt"
        raise DataError(f"{path} is {state}: header says {_describe(shape)} ({want} bytes), file has {len(data)}")
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape).copy())


def read_pair(images_path: Path, labels_path: Path, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(images ``(N, 28, 28)`` uint8, labels ``(N,)`` int64) of one split, checked against each other."""
    images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
    if tuple(images.shape[1:]) != (28, 28):
        raise DataError(f"{images_path} holds images of {images.shape[1]}x{images.shape[2]}, expected 28x28")
    if len(images) != len(labels):
        raise DataError(f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels: "
                        f"the two files are from different downloads or one is cut")
    labels = labels.long()
    if len(labels) and int(labels.max()) >= num_classes:
        raise DataError(f"{labels_path} is corrupt: it holds label {int(labels.max())}, outside 0..{num_classes - 1}")
    return images, labels
