"""Tiny FEMNIST and Shakespeare files in LEAF's real JSON format, as its preprocess.sh writes them.

``write_leaf(root)`` writes ``root/femnist/{train,test}/*.json``: writers spread over two files
per split, each writer's ``x`` a list of 784 floats ``byte / 255`` (as LEAF's data_to_json.py
makes them) and ``y`` labels in 0..61. It returns ``{split: {writer: (uint8 images (n, 784),
labels)}}``, the exact bytes the loader must give back. ``write_shakespeare(root)`` writes
``root/shakespeare/{train,test}/*.json`` the same way: each role's ``x`` 80-character strings and
``y`` the next characters, all of LEAF's ALL_LETTERS; it returns the strings.
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


# ---- Shakespeare (LEAF data/shakespeare): each sample 80 characters, its label the next one ----------------

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"  # LEAF's ALL_LETTERS
ROLES = {"THE_TEMPEST_PROSPERO": (6, 2), "HAMLET_OPHELIA": (3, 1), "KING_LEAR_FOOL": (5, 2), "MACBETH_PORTER": (4, 1)}


def shakespeare_samples(n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` samples as LEAF writes them: 80-character strings and one-character labels, drawn from ALL_LETTERS
    (newlines and quotes included, so the JSON escapes are read back too)."""
    rng = np.random.default_rng(seed)
    text = "".join(LETTERS[i] for i in rng.integers(0, len(LETTERS), n * 81))
    return [text[81 * j:81 * j + 80] for j in range(n)], [text[81 * j + 80] for j in range(n)]


def shakespeare_object(roles: dict) -> dict:
    """LEAF's object for ``{role: (x strings, y characters)}`` (with the ``hierarchies`` its niid files have)."""
    return {"users": list(roles), "hierarchies": [r.split("_")[0] for r in roles],
            "num_samples": [len(y) for _, y in roles.values()],
            "user_data": {r: {"x": list(x), "y": list(y)} for r, (x, y) in roles.items()}}


def write_shakespeare(root, roles: dict = ROLES, per_file: int = 2) -> dict:
    """``roles``: name -> (train samples, test samples), written under ``root/shakespeare/{train,test}`` in files
    of ``per_file`` roles. Returns ``{split: {role: (x strings, y characters)}}``, what the loader must read."""
    made = {"train": {}, "test": {}}
    for i, (r, sizes) in enumerate(roles.items()):
        for split, n in zip(("train", "test"), sizes):
            made[split][r] = shakespeare_samples(n, seed=100 * i + (split == "test"))
    for split in ("train", "test"):
        folder = root / "shakespeare" / split
        folder.mkdir(parents=True, exist_ok=True)
        names = list(made[split])
        for f, lo in enumerate(range(0, len(names), per_file)):
            part = {r: made[split][r] for r in names[lo:lo + per_file]}
            (folder / f"all_data_{f}_niid_0_keep_0_{split}_8.json").write_text(json.dumps(shakespeare_object(part)))
    return made
