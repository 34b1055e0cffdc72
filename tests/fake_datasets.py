"""Tiny files in each dataset's real on-disk format, for loader and CLI tests (no downloads)."""
from __future__ import annotations

import gzip
import io
import os
import pickle
import struct

import numpy as np
from PIL import Image

from seafl_dist.data.loaders import CINIC_CLASSES


def write_idx(path, array: np.ndarray, *, gz: bool = False) -> None:
    """IDX (big-endian): magic 0x00000803 for uint8 3-d images, 0x00000801 for 1-d labels."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">I", 0x0800 | array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    data = header + array.tobytes()
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def random_images(n, *shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, *shape), dtype=np.uint8)


class Py2Pickler(pickle._Pickler):
    """Writes what Python 2's cPickle wrote for CIFAR-10 (protocol 2): ``bytes`` as Python 2 ``str``
    (BINSTRING, read back as str with ``encoding="latin1"``), numpy's globals under ``numpy.core``."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj: bytes) -> None:
        n = len(obj)
        self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str

    def save_global(self, obj, name=None) -> None:
        module = obj.__module__.replace("numpy._core", "numpy.core")
        self.write(pickle.GLOBAL + f"{module}\n{name or obj.__qualname__}\n".encode())
        self.memoize(obj)


def py2_pickle(obj) -> bytes:
    """``obj`` pickled as CIFAR-10's batches are: protocol 2, Python 2 strings (pass them as bytes)."""
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def cifar_batch(name: str, imgs: np.ndarray, labels: list[int]) -> dict:
    """One batch dict as in the real files: Python 2 str keys and strings (bytes here), uint8 rows of 3072."""
    return {b"batch_label": name.encode(), b"labels": labels, b"data": imgs.reshape(len(imgs), 3072),
            b"filenames": [f"{name}_{j}.png".encode() for j in range(len(imgs))]}


def write_cifar(root, per_batch=2):
    """cifar-10-batches-py as distributed: Python 2 pickles of dicts, rows of 3072 bytes (R, G, B planes)."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    written = {}
    for k, name in enumerate(["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5",
                              "test_batch"]):
        imgs = random_images(per_batch, 3, 32, 32, seed=10 + k)
        labels = [(k + j) % 10 for j in range(per_batch)]
        (base / name).write_bytes(py2_pickle(cifar_batch(name, imgs, labels)))
        written[name] = (imgs, labels)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    (base / "batches.meta").write_bytes(py2_pickle({b"num_cases_per_batch": per_batch, b"label_names": names,
                                                    b"num_vis": 3072}))
    return written


class RunsCommand:
    """What a tampered download could hold: plain ``pickle.load`` of it runs ``command`` in a shell."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def write_cinic(root, split, per_class=2, seed=0, folder="cinic10"):
    rng = np.random.default_rng(seed)
    out = []
    for k, cls in enumerate(CINIC_CLASSES):
        d = root / folder / split / cls
        d.mkdir(parents=True)
        for j in range(per_class):
            if k == 3 and j == 0:  # CINIC-10 has a few greyscale PNGs among the ImageNet images
                grey = rng.integers(0, 256, size=(32, 32), dtype=np.uint8)
                Image.fromarray(grey, mode="L").save(d / f"n0001_{j}.png")
                out.append((k, f"n0001_{j}.png", np.stack([grey] * 3)))
            else:
                rgb = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
                Image.fromarray(rgb).save(d / f"cifar10-{split}-{j}.png")
                out.append((k, f"cifar10-{split}-{j}.png", rgb.transpose(2, 0, 1)))
    return sorted(out, key=lambda t: t[:2])  # the loader's order: class, then file name
