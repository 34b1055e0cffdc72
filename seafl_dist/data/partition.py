"""Split a dataset's indices into disjoint per-device shards (SPEC "Data").

    shards = partition(ds.labels, 100, method="dirichlet", concentration=0.3, samples_per_device=600, seed=0)
    hist = label_histograms(ds.labels, shards, ds.num_classes)   # saved as partition.json

The result is a pure function of (labels, num_devices, method, concentration,
samples_per_device, seed): every draw comes from ``numpy.random.default_rng(seed)`` in a fixed
order. Shards are sorted int64 index arrays and never share an index (PLATO's overlap; ours
do not). Three schemes:

``iid`` without ``samples_per_device``
    a seeded permutation cut into ``num_devices`` near-equal parts (sizes differ by at most 1).
``iid`` with ``samples_per_device=n``
    the first ``N·n`` indices of a seeded permutation, ``n`` per device.
``dirichlet`` without ``samples_per_device`` (every index used exactly once)
    the usual label-skew split (Hsu et al. 2019; NIID-Bench): for each class, proportions
    p ~ Dir(concentration · 1_N) over devices cut that class's shuffled indices. Shard sizes vary.
    A device left empty takes one index from the then-largest shard (lowest id on ties),
    repeated until every device has one, so every device can train; this moves at most
    ``N - 1`` samples and only happens at small concentrations.
``dirichlet`` with ``samples_per_device=n`` (each device exactly n, without replacement)
    each device draws its label mix q_k ~ Dir(concentration · 1_C), then n labels from
    Multinomial(n, q_k). Where the devices together ask more of a class than exists, that
    class is shared out in proportion to what each asked (largest remainders get the last
    units) and each device redraws its shortfall from its q_k restricted to classes that still
    have samples. No device is served first, so when the shards use (nearly) all the data,
    as MNIST's 100 x 600 = 60,000 does, the compromise falls on every device alike.
    Then each class's shuffled indices are dealt out in device order.

Lower concentration means more skew (each device sees fewer labels); the tests check it.
Impossible requests (N < 1, more samples than exist) raise ValueError naming the parameter.
"""
from __future__ import annotations

import numpy as np
import torch

METHODS = ("dirichlet", "iid")


def partition(labels, num_devices: int, *, method: str = "dirichlet", concentration: float = 0.3,
              samples_per_device: int | None = None, seed: int = 0) -> list[np.ndarray]:
    """Disjoint shards of ``range(len(labels))``, one sorted int64 array per device."""
    labels = _as_numpy(labels)
    total = len(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {labels.shape}")
    if not isinstance(num_devices, (int, np.integer)) or num_devices < 1:
        raise ValueError(f"num_devices={num_devices!r} is impossible; it must be an integer >= 1")
    if method not in METHODS:
        raise ValueError(f"method={method!r} is unknown; allowed: {', '.join(METHODS)}")
    if method == "dirichlet" and not concentration > 0:
        raise ValueError(f"concentration={concentration!r} is impossible; it must be > 0")
    if samples_per_device is not None:
        if samples_per_device < 1:
            raise ValueError(f"samples_per_device={samples_per_device!r} is impossible; it must be >= 1 (or None)")
        if num_devices * samples_per_device > total:
            raise ValueError(
                f"samples_per_device={samples_per_device} x num_devices={num_devices} = "
                f"{num_devices * samples_per_device} exceeds the {total} samples available; the limit is "
                f"samples_per_device <= {total // num_devices} for {num_devices} devices")
    elif num_devices > total:
        raise ValueError(f"num_devices={num_devices} exceeds the {total} samples available; "
                         f"every device needs at least one sample, so the limit is num_devices <= {total}")

    rng = np.random.default_rng(seed)
    if method == "iid":
        perm = rng.permutation(total)
        if samples_per_device is None:
            shards = np.array_split(perm, num_devices)
        else:
            shards = list(perm[: num_devices * samples_per_device].reshape(num_devices, samples_per_device))
    else:
        _, inv = np.unique(labels, return_inverse=True)
        inv = inv.reshape(-1)
        if samples_per_device is None:
            shards = _dirichlet_cover(inv, num_devices, concentration, rng)
        else:
            shards = _dirichlet_fixed(inv, num_devices, concentration, samples_per_device, rng)
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in shards]


def label_histograms(labels, shards, num_classes: int) -> list[list[int]]:
    """Per device, how many samples of each class it holds (``num_classes`` counts each)."""
    return label_counts(labels, shards, num_classes).tolist()


def label_counts(labels, shards, num_classes: int, *, chunk: int = 65536) -> np.ndarray:
    """:func:`label_histograms` as one ``(devices, num_classes)`` int64 array, counted ``chunk``
    devices at a time with one bincount each (a million devices: ~1 s, not a Python loop of them)."""
    labels = _as_numpy(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}); found {labels.min()}..{labels.max()}")
    out = np.zeros((len(shards), num_classes), dtype=np.int64)
    for lo in range(0, len(shards), chunk):
        part = [np.asarray(s, dtype=np.int64) for s in shards[lo:lo + chunk]]
        sizes = np.array([len(s) for s in part], dtype=np.int64)
        rows = np.repeat(np.arange(len(part), dtype=np.int64), sizes)
        cells = rows * num_classes + labels[np.concatenate(part)] if len(rows) else rows
        out[lo:lo + len(part)] = np.bincount(cells, minlength=len(part) * num_classes).reshape(len(part), num_classes)
    return out


def _as_numpy(labels) -> np.ndarray:
    if isinstance(labels, torch.Tensor):
        return labels.detach().cpu().numpy()
    return np.asarray(labels)


def _dirichlet(rng: np.random.Generator, concentration: float, size: int, rows: int | None = None) -> np.ndarray:
    """Dirichlet draws; a row that underflows (tiny concentration) becomes one-hot at a random place."""
    p = rng.dirichlet(np.full(size, concentration), size=rows)
    p2 = np.atleast_2d(p)
    bad = ~np.isfinite(p2).all(axis=1) | (p2.sum(axis=1) <= 0)
    for r in np.flatnonzero(bad):
        p2[r] = 0.0
        p2[r, rng.integers(size)] = 1.0
    return p2 if rows is not None else p2[0]


def _dirichlet_cover(inv: np.ndarray, n_dev: int, concentration: float, rng: np.random.Generator) -> list[np.ndarray]:
    parts: list[list[np.ndarray]] = [[] for _ in range(n_dev)]
    for c in range(int(inv.max()) + 1 if inv.size else 0):
        idx = rng.permutation(np.flatnonzero(inv == c))
        p = _dirichlet(rng, concentration, n_dev)
        cuts = np.floor(np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
        for k, piece in enumerate(np.split(idx, np.clip(cuts, 0, len(idx)))):
            parts[k].append(piece)
    shards = [np.concatenate(p) if p else np.empty(0, np.int64) for p in parts]
    for k in range(n_dev):  # give every empty device one sample from the largest shard
        if len(shards[k]) == 0:
            donor = int(np.argmax([len(s) for s in shards]))
            shards[k], shards[donor] = shards[donor][-1:], shards[donor][:-1]
    return shards


def _dirichlet_fixed(inv: np.ndarray, n_dev: int, concentration: float, n: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    n_cls = int(inv.max()) + 1
    remaining = np.bincount(inv, minlength=n_cls).astype(np.int64)
    q = _dirichlet(rng, concentration, n_cls, rows=n_dev)
    alloc = np.zeros((n_dev, n_cls), dtype=np.int64)
    need = np.full(n_dev, n, dtype=np.int64)
    while need.any():  # each pass grants everything or exhausts >= 1 class: at most n_cls + 1 passes
        w = q * (remaining > 0)
        empty = w.sum(axis=1) <= 0  # a device whose classes ran out: draw in proportion to what is left
        w[empty] = remaining / remaining.sum()
        w /= w.sum(axis=1, keepdims=True)
        demand = rng.multinomial(need, w)
        grant = demand.copy()
        asked = demand.sum(axis=0)
        for c in np.flatnonzero(asked > remaining):
            share, frac = np.divmod(demand[:, c] * remaining[c], asked[c])  # exact integer shares
            left = int(remaining[c] - share.sum())
            share[np.argsort(-frac, kind="stable")[:left]] += 1
            grant[:, c] = share
        alloc += grant
        remaining -= grant.sum(axis=0)
        need -= grant.sum(axis=1)
    shards: list[list[np.ndarray]] = [[] for _ in range(n_dev)]
    for c in range(n_cls):
        idx = rng.permutation(np.flatnonzero(inv == c))[: alloc[:, c].sum()]
        for k, piece in enumerate(np.split(idx, np.cumsum(alloc[:, c])[:-1])):
            shards[k].append(piece)
    return [np.concatenate(s) for s in shards]
