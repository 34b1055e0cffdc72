"""IDX files (MNIST, EMNIST): read, checked against their header, gunzipped where needed.

An IDX file is a 4-byte magic (0, 0, 8 = uint8, ndim), ``ndim`` big-endian uint32 sizes, then
the bytes. :func:`read_pair` reads an images file and its labels file and checks what a cut
download or a mixed-up copy would break: sizes against the header, equal counts, 28x28 images,
labels below the class count. Each problem is a :class:`DataError` naming the file.

The dry run (:mod:`seafl_dist.data.check`) makes the same checks, worded the same, without
reading the images: :func:`peek_idx` gives the shape from the header and the file's size alone
(:func:`idx_shape` checks both for the loader too), and :func:`check_pair` is the loader's
comparison of the two files.
"""
from __future__ import annotations

import gzip
import os
import shutil
import zlib
from pathlib import Path

import numpy as np
import torch

from .missing import DataError, read_bytes, reading

GZIP_MAGIC = b"\x1f\x8b"


def _gunzip_error(packed: Path, err: Exception) -> DataError:
    if isinstance(err, OSError) and not isinstance(err, gzip.BadGzipFile) and err.errno is not None:
        return DataError(f"cannot decompress {packed} into {packed.parent}: {err.strerror or err}")
    return DataError(f"{packed} is truncated or corrupt: gzip cannot decompress it ({err})")


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
            raise _gunzip_error(packed, err) from None
        os.replace(tmp, target)


def _describe(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"{shape[0]} labels"
    return f"{shape[0]} images of {'x'.join(map(str, shape[1:]))}"


def idx_shape(path: Path, ndim: int, head: bytes, size: int) -> tuple[int, ...]:
    """The shape an uint8 IDX file of ``ndim`` dimensions announces in ``head`` (its first bytes, at
    least the header's ``4 + 4 * ndim`` where the file has them), checked against its ``size`` in bytes."""
    header = 4 + 4 * ndim
    if head[:2] == GZIP_MAGIC:
        raise DataError(f"{path} is gzip-compressed but not named .gz: rename it to {path.name}.gz (it is "
                        f"decompressed on first use) or gunzip it")
    if len(head) < 4 or head[:4] != bytes([0, 0, 8, ndim]):
        raise DataError(f"{path} is not an IDX file of {ndim}-d uint8 data: it starts with bytes "
                        f"{head[:4].hex() or '(none: the file is empty)'}, expected 0000080{ndim}")
    if size < header:
        raise DataError(f"{path} is truncated: {size} bytes, shorter than its {header}-byte header")
    shape = tuple(int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    want = header + int(np.prod(shape, dtype=np.int64))
    if size != want:
        state = "truncated" if size < want else "corrupt"
        raise DataError(f"{path} is {state}: header says {_describe(shape)} ({want} bytes), file has {size}")
    return shape


def read_idx(path: Path, ndim: int) -> torch.Tensor:
    """An uint8 IDX file (magic 0x0000080<ndim>, big-endian sizes) as a tensor, read as torchvision does."""
    data = read_bytes(path)
    shape = idx_shape(path, ndim, data[:4 + 4 * ndim], len(data))
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape).copy())


class _Measure:
    """A write-only file that keeps the first ``keep`` bytes written to it and counts the rest."""

    def __init__(self, keep: int):
        self.keep, self.head, self.size = keep, b"", 0

    def write(self, chunk) -> int:
        if len(self.head) < self.keep:
            self.head += bytes(chunk[:self.keep - len(self.head)])
        self.size += len(chunk)
        return len(chunk)


def peek_idx(path: Path, ndim: int) -> tuple[int, ...]:
    """:func:`idx_shape` of ``path`` from its header and size, the images never read: a file that is
    there only as ``path.gz`` is decompressed in memory and counted (its CRC proves it whole), not
    unpacked to disk; the errors are those :func:`gunzip_missing` and :func:`read_idx` would give."""
    header = 4 + 4 * ndim
    if path.exists():
        with reading(path), open(path, "rb") as f:
            return idx_shape(path, ndim, f.read(header), os.fstat(f.fileno()).st_size)
    packed, sink = path.with_name(path.name + ".gz"), _Measure(header)
    try:
        with gzip.open(packed, "rb") as src:
            shutil.copyfileobj(src, sink)
    except (OSError, EOFError, zlib.error) as err:
        raise _gunzip_error(packed, err) from None
    return idx_shape(path, ndim, sink.head, sink.size)


def read_labels(path: Path) -> np.ndarray:
    """The labels of an IDX labels file (``path``, or in memory from ``path.gz``), after :func:`peek_idx`."""
    peek_idx(path, 1)
    data = read_bytes(path) if path.exists() else gzip.decompress(read_bytes(path.with_name(path.name + ".gz")))
    return np.frombuffer(data, dtype=np.uint8, offset=8).astype(np.int64)


def check_pair(images_path: Path, shape: tuple, labels_path: Path, labels: np.ndarray | torch.Tensor,
               num_classes: int) -> None:
    """One split's images (of ``shape``, as read or as announced) and labels belong together: 28x28
    images, one label each, every label below ``num_classes``."""
    if tuple(shape[1:]) != (28, 28):
        raise DataError(f"{images_path} holds images of {shape[1]}x{shape[2]}, expected 28x28")
    if shape[0] != len(labels):
        raise DataError(f"{images_path} holds {shape[0]} images but {labels_path} holds {len(labels)} labels: "
                        f"the two files are from different downloads or one is cut")
    if len(labels) and int(labels.max()) >= num_classes:
        raise DataError(f"{labels_path} is corrupt: it holds label {int(labels.max())}, outside 0..{num_classes - 1}")


def read_pair(images_path: Path, labels_path: Path, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(images ``(N, 28, 28)`` uint8, labels ``(N,)`` int64) of one split, checked against each other."""
    images, labels = read_idx(images_path, 3), read_idx(labels_path, 1).long()
    check_pair(images_path, tuple(images.shape), labels_path, labels, num_classes)
    return images, labels
