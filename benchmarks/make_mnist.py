"""Rebuild real MNIST's four IDX files under DATA_ROOT/MNIST/raw from its copies on GitHub, for machines
that can reach GitHub mirrors but not MNIST's own hosts (this project's VMs):

    python benchmarks/make_mnist.py KELAS_MNIST_CHECKOUT RASBT_MNIST_PNGS_CHECKOUT --data-root data

``kelas/mnist`` holds the test images, test labels and training labels as IDX (its training images
file is broken); ``rasbt/mnist-pngs`` holds all 70,000 images as lossless PNGs named by their index
in the original files (train/<label>/<index>.png; the test images as 60000 + index). The training images are written in that order,
and every PNG's label is checked against the IDX labels, so the result is MNIST as distributed.
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
from PIL import Image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kelas", type=Path)
    ap.add_argument("pngs", type=Path)
    ap.add_argument("--data-root", type=Path, default=Path("data"))
    args = ap.parse_args()
    raw = args.data_root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-labels-idx1-ubyte"):
        with gzip.open(args.kelas / f"{name}.gz") as src, open(raw / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    labels = np.frombuffer((raw / "train-labels-idx1-ubyte").read_bytes()[8:], dtype=np.uint8)
    images = np.zeros((len(labels), 28, 28), dtype=np.uint8)
    seen = np.zeros(len(labels), dtype=bool)
    for png in (args.pngs / "train").glob("*/*.png"):
        i, label = int(png.stem), int(png.parent.name)
        if labels[i] != label:
            raise SystemExit(f"{png}: label {label}, the IDX file says {labels[i]}")
        images[i] = np.asarray(Image.open(png).convert("L"))
        seen[i] = True
    if not seen.all():
        raise SystemExit(f"{(~seen).sum()} training images missing from {args.pngs / 'train'}")
    (raw / "train-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, len(labels), 28, 28) + images.tobytes())
    test = np.frombuffer((raw / "t10k-images-idx3-ubyte").read_bytes()[16:], dtype=np.uint8).reshape(-1, 28, 28)
    for png in list((args.pngs / "test").glob("*/*.png"))[:500]:  # named 60000 + index; the copies agree
        if not np.array_equal(np.asarray(Image.open(png).convert("L")), test[int(png.stem) - len(labels)]):
            raise SystemExit(f"{png} differs from the IDX test image {int(png.stem) - len(labels)}")
    print(f"MNIST written to {raw}: {len(labels)} training and {len(test)} test images")


if __name__ == "__main__":
    main()
