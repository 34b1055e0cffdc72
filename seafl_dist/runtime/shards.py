"""Which training rows each device holds (:func:`make_shards`: the partition by ``data.partition``, natural,
built-in, Flower's or a user's), and, under DP with devices that are groups, the test set checked against the
devices' own groups (:func:`check_private_test`). runtime/setup.py's ``prepare`` calls both.
"""
from __future__ import annotations

import numpy as np

from seafl_dist.data import partition
from seafl_dist.data.custom import custom_partition
from seafl_dist.data.holdout import test_set_refusal
from seafl_dist.data.labels import class_labels, keys, sample_groups
from seafl_dist.data.natural import natural_partition
from seafl_dist.settings import Config, ConfigError
from seafl_dist.settings.data import WITH_WRITERS
from seafl_dist.settings.plugins import FLWR, is_import_path
from seafl_dist.sim import stream_seed


def make_shards(cfg: Config, train) -> tuple[list[np.ndarray], list[str] | None]:
    """Device k's training rows (one int64 array per device) and, for ``data.partition: natural``, device k's
    group's name (else ``None``): the partition of ``train`` (a dataset, or the dry run's DataCheck) by
    ``data.partition`` (natural, built-in or a user's, by import path), from the ``data.seed`` stream, with the
    labels or groups data/labels.py reads (``data.partition_by``: a key of the samples)."""
    d, seed = cfg.data, stream_seed(cfg.data_seed, "partition")
    label_key, group_key = keys(d)
    if d.partition == "natural":  # each group a device: the shards come from the dataset's writers or a key's groups
        shards, writers = natural_partition(sample_groups(train, group_key), cfg.devices.num, seed, train.name,
                                            group_key)
        if cfg.devices.concurrency > len(shards):
            raise ConfigError(f"config key 'devices.concurrency' has value {cfg.devices.concurrency}; allowed: at "
                              f"most the {len(shards)} devices of {train.name}'s groups (devices.num=null: all)")
        return shards, writers
    if d.partition.startswith(FLWR):  # a Flower Datasets partitioner: Flower's own rows (data/flower.py)
        from seafl_dist.data.flower import flower_partition
        return flower_partition(d.partition, d.partition_args, train, cfg.devices.num), None
    labels = class_labels(train, label_key)
    if labels is None:  # samples without integer labels (a DataModule's): what needs none can still be made
        if d.partition != "iid":
            raise ConfigError(f"config key 'data.partition' has value {d.partition!r}; allowed: iid for data.name="
                              f"{d.name}, whose samples declare no integer labels (give its dataset or DataModule "
                              "a labels attribute, or name a key of its samples in data.partition_by)")
        labels = np.zeros(len(train), dtype=np.int64)  # iid reads the count only
    if is_import_path(d.partition):
        shards = custom_partition(d.partition, labels, cfg.devices.num, cfg.data_seed, overlap=d.shards_overlap)
    else:
        try:
            shards = partition(labels, cfg.devices.num, method=d.partition, concentration=d.concentration,
                               samples_per_device=d.samples_per_device, seed=seed)
        except ValueError as err:  # an impossible request (devices.num / data.samples_per_device) is a user mistake
            raise ConfigError(f"cannot partition {train.name} ({len(labels)} training samples): {err}") from None
    return [np.asarray(s, dtype=np.int64) for s in shards], None


def check_private_test(cfg: Config, test, writers: list[str]) -> None:
    """Under DP, with devices that are groups (``data.partition: natural``): refuse, in one line, a test set holding
    a device's group's samples (data/holdout.py ``test_set_refusal``: LEAF's ``-t sample`` split). A test set whose
    samples name no group cannot be checked, and passes (docs/privacy.md, "Assumptions and limits")."""
    d = cfg.data
    try:
        groups = sample_groups(test, keys(d)[1])
    except ConfigError:  # a DataModule's test samples without the group key: nothing to match them by
        return
    leaf = d.name in WITH_WRITERS
    why = test_set_refusal(writers, groups, field="data.root" if leaf else "data.name", value=d.root if leaf else d.name,
                           where=f"{test.name}'s test files" if leaf else f"{d.name}'s test split")
    if why:
        raise ConfigError(why)
