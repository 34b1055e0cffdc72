"""Held-out data per device: each device's shard split into a training part and a held-out part.

    train, held = split_holdout(shards, 0.2, seed=stream_seed(data_seed, "device_holdout"), labels=labels)
    held = writer_holdout(device_writers, groups)    # FEMNIST: each writer's own LEAF test samples
    rows = HeldOut.of(train_set, held, devices)      # the chosen devices' held-out rows, gathered once

**The split** (``data.device_holdout = f``). Device k with n_k samples holds out h_k = ⌊f·n_k + ½⌋ of
them (f·n_k rounded, halves up), so the count is a function of n_k alone, and keeps n_k − h_k for
training. Which ones: its samples are ordered by label (:func:`~seafl_dist.data.labels.class_labels`;
a dataset without labels: one group), at random within a label, and h_k positions are taken
systematically from that order: position p is held out when the step ⌈(p+1)·h_k/n_k − o_k⌉ −
⌈p·h_k/n_k − o_k⌉ is 1, o_k uniform in [0, 1). That is exactly h_k positions, and a label with g of
the device's samples gets ⌊g·h_k/n_k⌋ or ⌈g·h_k/n_k⌉ of them: stratified, to within one sample a
label. All draws (one uniform a sample, one offset a device) are one vectorised draw from the stream
``seed`` names, which the runtime derives from ``data.seed`` under the purpose ``device_holdout``, not
the partition's: the shards themselves do not move. No Python loop runs over the devices but the
final cut into arrays: a million devices of 2 samples split in about a second.

Both parts are sorted int64 index arrays into the training set and disjoint within a device. With
``data.shards_overlap`` (a custom split giving two devices one row) a row held out on one device may
be trained on by another: the split works on a device's positions, not on rows.

A device left without a training sample (n_k = 1 at f ≥ ½, say) is refused: :func:`holdout_refusal`
says so in one line naming the key, the device and the largest fraction that keeps one.

**A dataset's own per-device test data** (``data.device_test: writers``, with ``data.partition: natural``):
device k's held-out part is every sample its group has in the test set, matched by the group's name (FEMNIST,
Shakespeare: the writer's samples in LEAF's test files; a DataModule: the test samples of the same value under
``data.partition_by``); its training shard is untouched (LEAF's own split). A writer
with no test sample (absent from the test files, or listed there with none, as LEAF's ``-t sample``
split leaves a writer of very few samples) has an empty held-out part: it is left out of the device
evaluation's statistics and counted (report/device_eval.py).

**The server's validation split** (``data.validation = f``, :func:`validation_split`). Before the partition, the
training set itself is split the same way, as if it were one device's shard: ⌊f·n + ½⌋ of its n rows, stratified by
label, from the stream ``validation`` of ``data.seed``. The server evaluates on them in place of the test set (so a
method is tuned on data no reported result comes from), and the devices share out the rest.

**The central test set under DP** (:func:`test_set_refusal`). Where the devices are groups (``data.partition:
natural``) and the test set is grouped alike, a test set that holds a device's group's samples (LEAF's ``-t sample``
split: every writer's samples split 90/10 between the files) is that device's own held-out data: the central
evaluation would release its accuracy on them un-noised. Under ``privacy.enabled`` such a run is refused in one line
(runtime/setup.py); ``-t user`` (whole writers in the test files) passes. A test set whose samples name no group
cannot be checked: docs/privacy.md, "Assumptions and limits".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..settings import ConfigError
from .dataset import ArrayDataset


def holdout_sizes(sizes, fraction: float) -> np.ndarray:
    """h_k = ⌊f·n_k + ½⌋ for each device's shard size n_k."""
    return np.floor(np.asarray(sizes, dtype=np.float64) * fraction + 0.5).astype(np.int64)


def validation_split(labels: np.ndarray | None, n: int, fraction: float, seed: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(the rows the devices share out, the server's validation rows) of a training set of ``n`` rows: the split of
    :func:`split_holdout` over the whole set as one shard (module doc). ``labels``: each row's class (None: no
    stratification). Raises ConfigError where the split would leave no training row."""
    if n - int(holdout_sizes([n], fraction)[0]) < 1:
        raise ConfigError(f"config key 'data.validation' has value {fraction!r}; allowed: a share that leaves the "
                          f"devices a training sample of the {n}")
    (rest,), (held,) = split_holdout([np.arange(n, dtype=np.int64)], fraction, seed, labels=labels)
    return rest, held


def validation_data(train, fraction: float, seed: int):
    """``(the devices' part, the server's validation set)`` of ``train`` (:func:`validation_split`): two datasets
    for a loaded array set, or for the dry run's DataCheck the same check with the devices' labels and the
    validation set's size as its ``n_test``. A set of samples (a DataModule, a Hugging Face dataset) is refused."""
    from .labels import class_labels
    if getattr(train, "inputs", None) == "samples" or getattr(train, "samples", None):
        raise ConfigError(f"config key 'data.validation' has value {fraction!r}; allowed: 0 for data.name="
                          f"{train.name} (a set of samples: hold a validation split out in its own dataset)")
    labels = class_labels(train)
    rest, held = validation_split(labels, len(labels) if labels is not None else len(train), fraction, seed)
    if isinstance(train, ArrayDataset):
        return train.take(rest), train.take(held)
    import dataclasses
    return dataclasses.replace(train, labels=train.labels[rest], n_test=len(held)), None


def holdout_refusal(sizes, fraction: float) -> str | None:
    """Why ``data.device_holdout = fraction`` leaves a device of these shard sizes no training sample, or None."""
    sizes = np.asarray(sizes, dtype=np.int64)
    bad = np.flatnonzero(sizes - holdout_sizes(sizes, fraction) < 1)
    if not bad.size:
        return None
    k, small = int(bad[0]), int(sizes.min())
    limit = "no fraction" if small == 0 else f"a fraction below {(small - 0.5) / small:.4g}"
    return (f"config key 'data.device_holdout' has value {fraction!r}; allowed: a fraction that leaves every device a "
            f"training sample: {len(bad)} device(s) would keep none (device {k} has {int(sizes[k])} sample(s) and "
            f"would hold out {int(holdout_sizes(sizes[k:k + 1], fraction)[0])}); the smallest shard has {small}, so "
            f"{limit}")


def split_holdout(shards: list, fraction: float, seed: int, labels: np.ndarray | None = None
                  ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(training parts, held-out parts) of ``shards``, one sorted int64 array each per device (module doc).
    ``labels``: each training row's class (None: no stratification). Raises ConfigError when a device would
    keep no training sample."""
    sizes = np.fromiter((len(s) for s in shards), dtype=np.int64, count=len(shards))
    if fraction <= 0:
        return [np.asarray(s, dtype=np.int64) for s in shards], [np.zeros(0, dtype=np.int64)] * len(shards)
    why = holdout_refusal(sizes, fraction)
    if why:
        raise ConfigError(why)
    held_n = holdout_sizes(sizes, fraction)
    rows = np.concatenate(shards).astype(np.int64, copy=False) if len(shards) else np.zeros(0, np.int64)
    dev = np.repeat(np.arange(len(shards), dtype=np.int64), sizes)
    rng = np.random.default_rng(seed)
    u, offset = rng.random(len(rows)), rng.random(len(shards))
    group = labels[rows] if labels is not None else np.zeros(len(rows), dtype=np.int64)
    order = np.lexsort((u, group, dev))  # by device (rows are already grouped so), label, then at random
    pos = np.arange(len(rows), dtype=np.float64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    n, h, o = (np.repeat(a, sizes) for a in (sizes.astype(np.float64), held_n.astype(np.float64), offset))
    held = (np.ceil((pos + 1) * h / n - o) - np.ceil(pos * h / n - o)) > 0
    rows = rows[order]
    return _per_device(rows[~held], dev[~held], sizes - held_n), _per_device(rows[held], dev[held], held_n)


def _per_device(rows: np.ndarray, dev: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """``rows`` (grouped by ``dev``) cut into one sorted array per device."""
    rows = rows[np.lexsort((rows, dev))]
    ends = np.cumsum(counts).tolist()
    return [rows[a:b] for a, b in zip([0] + ends[:-1], ends)]  # slices: np.split takes 5 s at a million


def writer_holdout(writers: list[str], test_groups) -> list[np.ndarray]:
    """Device k's held-out rows of the test set: the rows of its group ``writers[k]`` in ``test_groups`` (its
    :class:`~seafl_dist.data.labels.Groups`: LEAF's writers, or a ``data.partition_by`` key's groups), matched by
    name; an empty array for a group with none."""
    where = {w: i for i, w in enumerate(test_groups.names)} if test_groups is not None else {}
    empty = np.zeros(0, dtype=np.int64)
    return [test_groups.rows(where[w]) if w in where else empty for w in writers]


def test_set_refusal(writers: list[str], test_groups, *, field: str, value, where: str) -> str | None:
    """Why a central test set grouped as ``test_groups`` (a :class:`~seafl_dist.data.labels.Groups`, or None) may not
    be a DP run's: it holds samples of device k's group ``writers[k]`` (module doc); None when it holds none.
    ``field``/``value``: the key the line names (``data.root`` for LEAF's files, else ``data.name``); ``where``:
    what the test set is, in the line."""
    held = writer_holdout(writers, test_groups)
    shared = [w for w, rows in zip(writers, held) if len(rows)]
    if not shared:
        return None
    return (f"config key '{field}' has value {value!r}; allowed: with privacy.enabled=true, a test set that holds no "
            f"device's own samples: {len(shared)} of the {len(writers)} devices' groups (e.g. {shared[0]!r}) have "
            f"samples in {where}, which the central evaluation would score without noise; make the test split of "
            "other groups (LEAF: preprocess.sh -t user, whole writers in one split), or privacy.enabled=false")


class Rows:
    """Rows ``lo:hi`` of a dataset, as a dataset of their own (``len`` and ``batch``): one device's held-out part,
    handed to the evaluation functions as they take the central test set."""

    def __init__(self, data: ArrayDataset, lo: int, hi: int):
        self.data, self.lo, self.hi = data, int(lo), int(hi)

    def __len__(self) -> int:
        return self.hi - self.lo

    def batch(self, idx, **kwargs):
        return self.data.batch(torch.as_tensor(idx, dtype=torch.int64) + self.lo, **kwargs)


@dataclass
class HeldOut:
    """The chosen devices' held-out rows in one dataset, device after device: ``devices[i]`` holds rows
    ``offsets[i]:offsets[i + 1]`` of ``data``. Rank 0 gathers them once, before the training set is dropped
    (runtime/setup.py ``keep_only``), so it keeps only these."""

    data: ArrayDataset
    devices: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, source: ArrayDataset, held: list, devices) -> "HeldOut":
        """``source``'s rows that ``held[d]`` names, for each ``d`` of ``devices`` in order."""
        devices = np.asarray(devices, dtype=np.int64)
        parts = [np.asarray(held[d], dtype=np.int64) for d in devices]
        rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts], dtype=np.int64)]).astype(np.int64)
        data = source.take(rows)
        return cls(data, devices, offsets)

    @property
    def sizes(self) -> np.ndarray:
        """Each chosen device's held-out sample count."""
        return np.diff(self.offsets)

    def rows(self, i: int, data: ArrayDataset | None = None) -> Rows:
        """The held-out part of the ``i``-th chosen device (``devices[i]``), of ``data`` (``self.data`` moved to
        the evaluation's device, say) or of ``self.data``."""
        return Rows(self.data if data is None else data, self.offsets[i], self.offsets[i + 1])
