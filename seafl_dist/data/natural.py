"""``data.partition: natural``: each group of samples is a device: a writer of FEMNIST, a role of Shakespeare,
or the samples of a DataModule sharing a value under ``data.partition_by`` (a speaker, a user).

    groups = sample_groups(train, key=cfg.data.partition_by)       # data/labels.py
    shards, names = natural_partition(groups, num_devices=None, seed=stream_seed(data_seed, "partition"),
                                      name=train.name)

Device k is the k-th group of a permutation seeded by ``seed`` (the run's ``data.seed``), and its shard is
every training sample of that group. ``num_devices=None`` (``devices.num: null``) takes every group; N takes
the first N of the same order, so device k is the same group for every N and the population is a pure
function of (the data, ``data.seed``), as the other splits are.
"""
from __future__ import annotations

import numpy as np

from seafl_dist.settings import ConfigError

from .labels import Groups


def natural_partition(groups: Groups | None, num_devices: int | None, seed: int, name: str,
                      key: str | None = None) -> tuple[list[np.ndarray], list[str]]:
    """One shard per group taken (see the module doc) and the groups' names, in device order. ``groups`` None
    (the data has none) is refused in one line; ``key``: the ``data.partition_by`` that made them, for messages."""
    if groups is None:
        raise ConfigError(f"config key 'data.partition' has value 'natural'; allowed: dirichlet, iid or an import "
                          f"path for data.name={name}: natural makes each writer a device and {name} has no writers "
                          "(femnist and shakespeare have); to group a DataModule's samples, name their group key in "
                          "data.partition_by")
    total = len(groups)
    who = "writers" if key is None else f"groups of data.partition_by={key}"
    if num_devices is not None and num_devices > total:
        raise ConfigError(f"config key 'devices.num' has value {num_devices}; allowed: at most the {total} {who} "
                          f"of {name} with data.partition=natural, or null for all of them")
    order = np.random.default_rng(seed).permutation(total)[:num_devices]
    return [groups.rows(int(g)) for g in order], [groups.names[int(g)] for g in order]
