"""Tiny files in each dataset's real on-disk format, for loader and CLI tests (no downloads)."""
from __future__ import annotations

import gzip
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


def write_cifar(root, per_batch=2):
    """cifar-10-batches-py as distributed: pickled dicts, rows of 3072 bytes (R, G, B planes)."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    written = {}
    for k, name in enumerate(["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5",
                              "test_batch"]):
        imgs = random_images(per_batch, 3, 32, 32, seed=10 + k)
        labels = [(k + j) % 10 for j in range(per_batch)]
        with open(base / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels, "data": imgs.reshape(per_batch, 3072),
                         "filenames": [f"{name}_{j}.png" for j in range(per_batch)]}, f)
        written[name] = (imgs, labels)
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"num_cases_per_batch": per_batch, "label_names": names, "num_vis": 3072}, f)
    return written


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
