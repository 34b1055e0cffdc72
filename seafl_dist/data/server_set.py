"""The server-held set: the slice of the training set that the defenses which need data of their own read on rank 0
(``algorithm.defense.server_samples``: FLTrust's root dataset; docs/robustness.md, "The server-held set").

    train, held = server_set(train, 100, seed=stream_seed(data_seed, "server_data"))

It is carved as ``data.validation``'s slice is (data/holdout.py): the training set taken as one shard, its rows
ordered by label and at random within a label, and exactly ``count`` of them taken systematically from that order
(stratified: a label of g rows gets ⌊g·count/n⌋ or ⌈g·count/n⌉), from its own stream. It is carved after
``data.validation``'s slice (from what that leaves) and before the partition, on every rank alike, so it is
disjoint from the validation set, from the test set (a separate split) and from every device's shard, and the
shards are the same on one process and on W ranks. Only the server reads it.
"""
from __future__ import annotations

import numpy as np

from ..settings import ConfigError
from .dataset import ArrayDataset
from .holdout import split_holdout

KEY = "algorithm.defense.server_samples"


def server_rows(labels: np.ndarray | None, n: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(the rows left to the devices, the server's ``count`` rows) of a training set of ``n`` rows (module doc);
    refused in one line where ``count`` would leave the devices no row."""
    if count >= n:
        raise ConfigError(f"config key '{KEY}' has value {count!r}; allowed: fewer than the {n} training samples "
                          f"(the devices need the rest)")
    (rest,), (held,) = split_holdout([np.arange(n, dtype=np.int64)], count / n, seed, labels=labels)
    if len(held) != count:  # count/n·n rounds back to count: ⌊count + ½⌋ for any float error below ½
        raise AssertionError(f"server set of {len(held)} rows, not {count}")
    return rest, held


def server_set(train, count: int, seed: int):
    """``(the devices' part, the server-held set)`` of a loaded array set (:func:`server_rows`); a set of samples
    (a DataModule, a Hugging Face dataset) is refused in one line."""
    from .labels import class_labels
    if not isinstance(train, ArrayDataset) or getattr(train, "inputs", None) == "samples":
        raise ConfigError(f"config key '{KEY}' has value {count!r}; allowed: 0 for data.name="
                          f"{getattr(train, 'name', '?')} (the server-held set is carved from an array dataset)")
    labels = class_labels(train)
    rest, held = server_rows(labels, len(labels) if labels is not None else len(train), count, seed)
    return train.take(rest), train.take(held)
