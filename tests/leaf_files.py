"""Tiny FEMNIST files in LEAF's real JSON format, as its preprocess.sh writes them (data/femnist).

``write_leaf(root)`` writes ``root/femnist/{train,test}/*.json``: writers spread over two files
per split, each writer's ``x`` a list of 784 floats ``byte / 255`` (as LEAF's data_to_json.py
makes them) and ``y`` labels in 0..61. It returns ``{split: {writer: (uint8 images (n, 784),
labels)}}``, the exact bytes the loader must give back.
"""
import json

import numpy as np

WRITERS = {"f0000_14": (5, 2), "f0001_41": (3, 1), "f0002_07": (4, 2), "f0003_33": (2, 1), "f0004_28": (6, 3)}


def leaf_samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 784), dtype=np.uint8)
    images[:, :10] = [0, 255, 1, 254, 127, 128, 3, 252, 51, 204]  # edge and half-way bytes round-trip too
    return images, rng.integers(0, 62, n)


def leaf_object(writers: dict) -> dict:
    """LEAF's object for ``{writer: (images uint8 (n, 784), labels)}``."""
    return {"users": list(writers), "num_samples": [len(y) for _, y in writers.values()],
            "user_data": {w: {"x": (x / 255).tolist(), "y": [int(v) for v in y]} for w, (x, y) in writers.items()}}


def write_leaf(root, writers: dict = WRITERS, per_file: int = 3) -> dict:
    """``writers``: name -> (train samples, test samples). Files are named as LEAF's split_data.py names them."""
    made = {"train": {}, "test": {}}
    for i, (w, sizes) in enumerate(writers.items()):
        for split, n in zip(("train", "test"), sizes):
            made[split][w] = leaf_samples(n, seed=100 * i + (split == "test"))
    for split, frac in (("train", "9"), ("test", "9")):
        folder = root / "femnist" / split
        folder.mkdir(parents=True, exist_ok=True)
        names = list(made[split])
        for f, lo in enumerate(range(0, len(names), per_file)):
            part = {w: made[split][w] for w in names[lo:lo + per_file]}
            (folder / f"all_data_{f}_niid_1_keep_0_{split}_{frac}.json").write_text(json.dumps(leaf_object(part)))
    return made
