"""``data.partition: natural``: each writer of a dataset that knows its writers (FEMNIST, Shakespeare) is a device.

    shards, names = natural_partition(train, num_devices=None, seed=stream_seed(data_seed, "partition"))

Device k is the k-th writer of a permutation seeded by ``seed`` (the run's ``data.seed``), and
its shard is every training sample of that writer. ``num_devices=None`` (``devices.num: null``)
takes every writer; N takes the first N of the same order, so device k is the same writer for
every N and the population is a pure function of (the files, ``data.seed``), as the other splits are.
"""
from __future__ import annotations

import numpy as np

from seafl_dist.settings import ConfigError


def has_writers(dataset) -> bool:
    """Whether ``dataset`` (a WriterDataset, or the dry run's DataCheck of one) groups its rows by writer:
    writer ``i`` (``writers[i]``) holds rows ``offsets[i]:offsets[i + 1]``."""
    return bool(getattr(dataset, "writers", None)) and getattr(dataset, "offsets", None) is not None


def natural_partition(dataset, num_devices: int | None, seed: int) -> tuple[list[np.ndarray], list[str]]:
    """One shard per writer taken (see the module doc) and the writers' names, in device order."""
    if not has_writers(dataset):
        raise ConfigError(f"config key 'data.partition' has value 'natural'; allowed: dirichlet, iid or an import "
                          f"path for data.name={dataset.name}: natural makes each writer a device and {dataset.name} "
                          "has no writers (femnist and shakespeare have)")
    total = len(dataset.writers)
    if num_devices is not None and num_devices > total:
        raise ConfigError(f"config key 'devices.num' has value {num_devices}; allowed: at most the {total} writers "
                          f"of {dataset.name} with data.partition=natural, or null for all of them")
    order = np.random.default_rng(seed).permutation(total)[:num_devices]
    rows = dataset.offsets
    return ([np.arange(rows[w], rows[w + 1], dtype=np.int64) for w in order],
            [dataset.writers[int(w)] for w in order])
