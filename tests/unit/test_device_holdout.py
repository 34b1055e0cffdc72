"""The per-device hold-out (data/holdout.py): disjoint, exactly sized, stratified by label, seeded by its own
stream, the shards themselves unmoved; a device left without a training sample refused in one line."""
from __future__ import annotations

import math

import numpy as np
import pytest

from seafl_dist.data import partition
from seafl_dist.data.holdout import HeldOut, split_holdout, writer_holdout
from seafl_dist.data.labels import Groups, class_labels
from seafl_dist.runtime.device_eval import eval_devices, held_out_split
from seafl_dist.settings import ConfigError, config_from_dict

LABELS = np.random.default_rng(7).integers(0, 10, size=6000)
SHARDS = partition(LABELS, 40, method="dirichlet", concentration=0.3, seed=3)


def test_disjoint_and_complete_per_device_sorted_and_exactly_sized():
    train, held = split_holdout(SHARDS, 0.2, seed=5, labels=LABELS)
    for s, t, h in zip(SHARDS, train, held):
        assert np.intersect1d(t, h).size == 0
        assert np.array_equal(np.sort(np.concatenate([t, h])), s)
        assert len(h) == int(np.floor(0.2 * len(s) + 0.5))
        assert t.dtype == h.dtype == np.int64 and np.all(np.diff(t) > 0) and np.all(np.diff(h) > 0)


def test_stratified_each_label_within_one_sample_of_its_share():
    train, held = split_holdout(SHARDS, 0.3, seed=5, labels=LABELS)
    for s, h in zip(SHARDS, held):
        share = np.bincount(LABELS[s], minlength=10) * len(h) / len(s)
        got = np.bincount(LABELS[h], minlength=10)
        assert np.all(np.abs(got - share) < 1), (got, share)


def test_without_labels_a_plain_random_subset_that_is_not_stratified():
    """Stratification is what keeps a label's count within one of its share: drawn without labels it strays."""
    _, held = split_holdout(SHARDS, 0.3, seed=5, labels=None)
    off = [np.abs(np.bincount(LABELS[h], minlength=10) - np.bincount(LABELS[s], minlength=10) * len(h) / len(s)).max()
           for s, h in zip(SHARDS, held)]
    assert max(off) >= 1
    assert [len(h) for h in held] == [math.floor(0.3 * len(s) + 0.5) for s in SHARDS]  # h_k = ⌊f·n_k + ½⌋


def test_seeded_its_own_stream_and_the_shards_do_not_move():
    a = split_holdout(SHARDS, 0.2, seed=5, labels=LABELS)[1]
    b = split_holdout(SHARDS, 0.2, seed=5, labels=LABELS)[1]
    c = split_holdout(SHARDS, 0.2, seed=6, labels=LABELS)[1]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    cfg = config_from_dict({"devices": {"num": 40, "concurrency": 4}, "algorithm": {"buffer_size": 2},
                            "data": {"device_holdout": 0.2, "seed": 11}})
    train, held = held_out_split(cfg, type("D", (), {"labels": LABELS})(), SHARDS)
    from seafl_dist.sim import stream_seed
    mine = split_holdout(SHARDS, 0.2, stream_seed(11, "device_holdout"), LABELS)[1]
    theirs = split_holdout(SHARDS, 0.2, stream_seed(11, "partition"), LABELS)[1]
    assert all(np.array_equal(x, y) for x, y in zip(held, mine))  # the stream named device_holdout
    assert not all(np.array_equal(x, y) for x, y in zip(held, theirs))  # not the partition's


def test_a_device_left_without_a_training_sample_is_refused_in_one_line():
    shards = [np.arange(0, 10), np.array([10]), np.arange(11, 14)]
    assert split_holdout(shards, 0.49, seed=0, labels=LABELS)[0][1].tolist() == [10]
    with pytest.raises(ConfigError) as err:
        split_holdout(shards, 0.5, seed=0, labels=LABELS)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("config key 'data.device_holdout' has value 0.5; allowed: a fraction that leaves every "
                           "device a training sample: 1 device(s) would keep none (device 1 has 1 sample(s)")
    assert "a fraction below 0.5" in text


def test_zero_is_off_and_a_million_devices_split_in_one_vectorised_draw():
    train, held = split_holdout(SHARDS, 0.0, seed=0, labels=LABELS)
    assert all(np.array_equal(s, t) for s, t in zip(SHARDS, train)) and all(len(h) == 0 for h in held)
    many = list(np.random.default_rng(0).integers(0, 6000, size=(1_000_000, 2)))
    train, held = split_holdout(many, 0.5, seed=1, labels=LABELS)
    assert len(held) == 1_000_000 and all(len(t) == 1 and len(h) == 1 for t, h in zip(train[:1000], held[:1000]))


def test_class_labels_or_none():
    import torch
    assert class_labels(type("D", (), {"labels": torch.tensor([1, 2])})()).tolist() == [1, 2]
    assert class_labels(type("D", (), {"labels": np.array([0.5, 1.5])})()) is None  # regression targets
    assert class_labels(type("D", (), {"labels": np.zeros((3, 2), dtype=int)})()) is None  # multi-label
    assert class_labels(object()) is None


def test_sample_of_devices_is_seeded_by_the_data_seed_and_fixed():
    cfg = config_from_dict({"data": {"seed": 4, "device_holdout": 0.2}, "run": {"device_eval_every": 1,
                                                                              "device_eval_sample": 10}})
    a, b = eval_devices(cfg, 100), eval_devices(cfg, 100)
    assert np.array_equal(a, b) and len(a) == 10 and np.all(np.diff(a) > 0)
    other = config_from_dict({"data": {"seed": 5, "device_holdout": 0.2}, "run": {"device_eval_every": 1,
                                                                                "device_eval_sample": 10}})
    assert not np.array_equal(a, eval_devices(other, 100))
    assert np.array_equal(eval_devices(config_from_dict({}), 7), np.arange(7))


def test_writers_own_test_rows_matched_by_name():
    groups = Groups(["b", "a"], np.array([0, 3, 1]), np.array([0, 2, 3]))  # b: rows 0 and 3, a: row 1
    held = writer_holdout(["a", "c", "b"], groups)
    assert [h.tolist() for h in held] == [[1], [], [0, 3]] and held[1].dtype == np.int64
    assert [h.tolist() for h in writer_holdout(["a"], None)] == [[]]  # a test set without groups: nothing held out


def test_gathered_rows_device_after_device():
    import torch

    from seafl_dist.data import ArrayDataset
    ds = ArrayDataset(torch.arange(6, dtype=torch.uint8).view(6, 1, 1, 1).expand(6, 1, 2, 2).contiguous(),
                      torch.arange(6), 6, "t", (0.0,), (1.0,))
    got = HeldOut.of(ds, [np.array([4, 5]), np.array([], dtype=np.int64), np.array([1])], [2, 0, 1])
    assert got.devices.tolist() == [2, 0, 1] and got.sizes.tolist() == [1, 2, 0]
    assert got.data.labels.tolist() == [1, 4, 5]
    assert got.rows(1).batch(torch.arange(2))[1].tolist() == [4, 5]


def test_refused_in_config_where_no_data_is_held_out_and_where_writers_do_not_apply():
    with pytest.raises(ConfigError, match="'run.device_eval_every' has value 2; allowed: null unless the devices "
                                          "hold data out"):
        config_from_dict({"run": {"device_eval_every": 2}})
    with pytest.raises(ConfigError, match="'run.device_eval_every' has value 3; allowed: a multiple of run.eval_every"):
        config_from_dict({"data": {"device_holdout": 0.1}, "run": {"device_eval_every": 3, "eval_every": 2}})
    with pytest.raises(ConfigError, match="'data.device_test' has value 'writers'; allowed: split, unless"):
        config_from_dict({"data": {"device_test": "writers"}})
    with pytest.raises(ConfigError, match="'run.device_eval_sample' has value 200; allowed: at most devices.num"):
        config_from_dict({"run": {"device_eval_sample": 200}})
