"""CINIC-10 from its folders of PNGs (see loaders.py for where it is looked for and the cache).

A PNG that cannot be decoded or is not 32x32 is a :class:`DataError` naming it; a cache file
that cannot be read (cut, damaged, of other shapes) is ignored with a warning and rewritten."""
from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.error import URLError

import numpy as np
import torch

from .dataset import NORMALIZATION, ArrayDataset, save_cache
from .missing import DataError, DatasetNotFoundError, not_found as _not_found

CINIC_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CINIC_URL = "https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz"
CINIC_DIRS = ("cinic10", "CINIC-10", "")  # under data.root, searched in this order ("" = data.root itself)


# ---- CINIC-10 (folders of PNGs) -------------------------------------------------------------

def load_cinic10(root: Path, train: bool, download: bool) -> ArrayDataset:
    bases = [root / d if d else root for d in CINIC_DIRS]
    split = "train" if train else "test"
    expected = [f"{split}/{c}/*.png" for c in CINIC_CLASSES]
    how = (f"download {CINIC_URL} and unpack it so that train/, valid/ and test/ sit directly in one of those "
           f"places (e.g. mkdir -p {bases[1]} && tar xzf CINIC-10.tar.gz -C {bases[1]})")
    base = next((b for b in bases if _cinic_present(b / split)), None)
    if base is None and download:
        _download_cinic(bases[0], expected, how)
        base = bases[0] if _cinic_present(bases[0] / split) else None
    if base is None:
        raise DatasetNotFoundError(
            f"dataset 'cinic10' not found: searched {', '.join(str(b) for b in bases)}; expected "
            f"{', '.join(expected)} in one of them. To get it: set data.download=true on a machine with internet "
            f"access, or {how}.")
    folder = base / split
    files = list_pngs(folder)
    fingerprint = hashlib.sha1("\n".join(f"{c}/{n}" for c, names in files for n in names).encode()).hexdigest()
    cache = base / f".{split}.seafl-cache.npz"
    images, labels = _read_cache(cache, fingerprint, sum(len(names) for _, names in files))
    if images is None:
        paths = [folder / c / n for c, names in files for n in names]
        labels = np.array([k for k, (_, names) in enumerate(files) for _ in names], dtype=np.int64)
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            images = np.stack(list(pool.map(read_png, paths)))
        save_cache(cache, images=images, labels=labels, fingerprint=np.array(fingerprint))
    return ArrayDataset(torch.from_numpy(images), torch.from_numpy(labels), 10, "cinic10",
                        *NORMALIZATION["cinic10"], list(CINIC_CLASSES))


def _cinic_present(folder: Path) -> bool:
    return all((folder / c).is_dir() and any(p.suffix == ".png" for p in (folder / c).iterdir()) for c in CINIC_CLASSES)


def list_pngs(folder: Path) -> list[tuple[str, list[str]]]:
    """(class, its PNG file names, sorted) for each class of a split's ``folder``, in label order."""
    try:
        return [(c, sorted(e.name for e in os.scandir(folder / c) if e.name.endswith(".png"))) for c in CINIC_CLASSES]
    except OSError as err:
        raise DataError(f"cannot list CINIC-10's {folder.name} folder {folder}: {err.strerror or err}") from None


def read_png(path: Path) -> np.ndarray:
    """One CINIC-10 image as uint8 (3, 32, 32); a PNG that cannot be decoded or is not 32x32 is a DataError."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.uint8)  # a few CINIC images are greyscale
    except (OSError, ValueError, SyntaxError) as err:  # PIL: UnidentifiedImageError, "image file is truncated"
        if isinstance(err, OSError) and err.errno is not None:
            raise DataError(f"cannot read CINIC-10 image {path}: {err.strerror or err}") from None
        raise DataError(f"CINIC-10 image {path} is truncated or corrupt: PIL cannot decode it ({err}); replace it "
                        f"from the archive or delete it") from None
    if arr.shape != (32, 32, 3):
        raise DataError(f"CINIC-10 image {path} is {arr.shape[1]}x{arr.shape[0]}, expected 32x32")
    return arr.transpose(2, 0, 1)


def _read_cache(path: Path, fingerprint: str, n: int):
    """(images, labels) from the cache if it is whole and of these files, else (None, None): the PNGs
    are decoded again and the cache rewritten (it is ours, derived data, so a bad one costs time only)."""
    if not path.exists():
        return None, None
    try:
        with np.load(path) as z:
            if str(z["fingerprint"]) != fingerprint:
                return None, None  # files added or removed since: not an error
            images, labels = z["images"], z["labels"]
        if images.shape != (n, 3, 32, 32) or images.dtype != np.uint8 or labels.shape != (n,) or \
                labels.dtype != np.int64:
            raise ValueError(f"arrays of {images.shape} {images.dtype} and {labels.shape} {labels.dtype}")
        return images, labels
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        print(f"seafl: warning: ignoring the unreadable CINIC-10 cache {path} ({type(err).__name__}: {err}); "
              f"decoding the PNGs again", file=sys.stderr)
        return None, None


def _download_cinic(base: Path, expected: list[str], how: str) -> None:
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(CINIC_URL, download_root=str(base))
    except (RuntimeError, OSError, URLError) as err:
        raise _not_found("cinic10", base, expected, how, cause=str(err)) from err
    nested = base / "CINIC-10"  # if the archive holds a top folder, lift its splits up
    for split in ("train", "valid", "test"):
        if (nested / split).is_dir() and not (base / split).exists():
            os.replace(nested / split, base / split)
