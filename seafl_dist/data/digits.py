"""The bundled digits dataset, read without importing scikit-learn.

Owns two things: reading scikit-learn's ``digits.csv.gz`` (1,797 8x8 images, shipped inside the
installed scikit-learn package) from its file, and the seeded stratified hold-out that gives
exactly the rows of ``sklearn.model_selection.train_test_split(..., stratify=labels,
random_state=seed)``. Importing scikit-learn costs every process (each ``seafl run``, each
torchrun rank) seconds of CPU before the first step; scikit-learn stays a dependency because it
ships the file, and tests/unit/test_digits.py checks both pieces against scikit-learn itself.
"""
from __future__ import annotations

import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np


def digits_file() -> Path:
    """scikit-learn's ``datasets/data/digits.csv.gz``, found without importing the package."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits dataset ships with scikit-learn: pip install scikit-learn")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    if not path.exists():
        raise FileNotFoundError(f"{path}: scikit-learn's digits file is missing (reinstall scikit-learn)")
    return path


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images float64 (1797, 8, 8) valued 0..16, labels int64), as ``load_digits()`` gives them."""
    with gzip.open(digits_file(), "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)


def approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Samples per class for ``n_draws`` draws: the floor of each class's share, the rest given one each
    in order of the largest remainder, ties broken by ``rng`` (scikit-learn's ``_approximate_mode``)."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need = int(n_draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add = min(len(inds), need)
            floored[rng.choice(inds, size=add, replace=False)] += 1
            need -= add
            if need == 0:
                break
    return floored.astype(int)


def stratified_split(labels: np.ndarray, seed: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) row indices: ``ceil(test_fraction * n)`` test rows, each class split in
    proportion, seeded; the rows ``train_test_split(stratify=labels, random_state=seed)`` returns."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction} must be in (0, 1)")
    labels = np.asarray(labels)
    n = len(labels)
    n_test = math.ceil(test_fraction * n)
    n_train = n - n_test
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if counts.min() < 2:
        raise ValueError(f"a class has {counts.min()} sample: a stratified split needs at least 2 per class")
    if min(n_train, n_test) < len(classes):
        raise ValueError(f"test_fraction={test_fraction} leaves fewer rows than the {len(classes)} classes "
                         f"on one side ({n_train} train, {n_test} test)")
    by_class = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    n_i = approximate_mode(counts, n_train, rng)
    t_i = approximate_mode(counts - n_i, n_test, rng)
    train, test = [], []
    for i in range(len(classes)):
        rows = by_class[i].take(rng.permutation(counts[i]), mode="clip")
        train.extend(rows[:n_i[i]])
        test.extend(rows[n_i[i]:n_i[i] + t_i[i]])
    return np.sort(np.asarray(train, dtype=np.int64)), np.sort(np.asarray(test, dtype=np.int64))
