"""Hugging Face datasets a test makes on the spot (issue 54 B, C): nothing is downloaded.

``image_dataset(folder)`` saves (``save_to_disk``) a DatasetDict of 8x8 grey images (``Image`` feature: PNG
bytes, decoded by the dataset's own formatting) with a ``ClassLabel`` of 4 classes (a bright band per class),
a ``writer`` (one of 7, skewed) and a ``uid`` (the row's position, so a test can name the rows a partition
holds). ``text_files(folder)`` writes ``train.parquet`` and ``test.parquet`` of 80 character ids and the class
of the last one (tests/token_datasets.py's windows), for the parquet builder with ``data.files``.
"""
from pathlib import Path

import numpy as np

WRITERS = 7


def _images(n: int, seed: int):
    g = np.random.default_rng(seed)
    labels = g.integers(0, 4, n)
    images = (g.random((n, 8, 8)) * 60).astype(np.uint8)
    for k in range(4):
        images[labels == k, 2 * k:2 * k + 2, :] += 180
    writers = g.choice(WRITERS, n, p=np.arange(1, WRITERS + 1) / sum(range(1, WRITERS + 1)))
    return images, labels, writers


def image_dataset(folder: Path) -> Path:
    import datasets
    from PIL import Image
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list("abcd")),
                                  "writer": datasets.Value("string"), "uid": datasets.Value("int64")})
    splits = {}
    for split, n, seed in (("train", 400, 0), ("test", 120, 1)):
        images, labels, writers = _images(n, seed)
        splits[split] = datasets.Dataset.from_dict(
            {"image": [Image.fromarray(a) for a in images], "label": labels.tolist(),
             "writer": [f"w{w}" for w in writers], "uid": list(range(n))}, features=features)
    path = Path(folder) / "bands_hf"
    datasets.DatasetDict(splits).save_to_disk(str(path))
    return path


def image_arrays(split: str):
    """(images (N, 1, 8, 8) uint8, labels, writers) as image_dataset made them: the test's own copy."""
    images, labels, writers = _images(*{"train": (400, 0), "test": (120, 1)}[split])
    return images[:, None], labels, np.array([f"w{w}" for w in writers])


def token_rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 20, (n, 80))


def text_files(folder: Path) -> dict:
    import datasets
    out = {}
    for split, n, seed in (("train", 400, 0), ("test", 120, 1)):
        rows = token_rows(n, seed)
        path = Path(folder) / f"{split}.parquet"
        datasets.Dataset.from_dict({"ids": rows.tolist(), "topic": (rows[:, -1] % 4).tolist()}).to_parquet(str(path))
        out[split] = path.name
    return out
