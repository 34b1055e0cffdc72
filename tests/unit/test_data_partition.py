"""Partitions: disjoint, complete or exactly sized, deterministic, skewed as asked."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seafl_dist.data import label_histograms, partition

LABELS = np.random.default_rng(123).integers(0, 10, size=6000)


def flat(shards):
    return np.concatenate(shards)


def skew(labels, shards, num_classes=10):
    """Mean share of a device's most common label (0.1 = balanced, 1.0 = one label)."""
    h = np.array(label_histograms(labels, shards, num_classes), dtype=float)
    return float((h.max(axis=1) / h.sum(axis=1)).mean())


@pytest.mark.parametrize("method", ["dirichlet", "iid"])
def test_complete_and_disjoint(method):
    shards = partition(LABELS, 37, method=method, concentration=0.3, seed=1)
    assert len(shards) == 37 and all(len(s) >= 1 for s in shards)
    assert all(s.dtype == np.int64 and np.all(np.diff(s) > 0) for s in shards)  # sorted, no repeats
    assert np.array_equal(np.sort(flat(shards)), np.arange(len(LABELS)))  # every index exactly once


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(s) for s in partition(LABELS, 37, method="iid", seed=0)]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("method", ["dirichlet", "iid"])
@pytest.mark.parametrize("concentration", [0.05, 0.3, 5.0])
def test_exact_samples_per_device(method, concentration):
    shards = partition(LABELS, 10, method=method, concentration=concentration, samples_per_device=600, seed=2)
    assert [len(s) for s in shards] == [600] * 10  # uses all 6,000: the tightest case
    assert len(np.unique(flat(shards))) == 6000
    shards = partition(LABELS, 20, method=method, concentration=concentration, samples_per_device=50, seed=2)
    assert [len(s) for s in shards] == [50] * 20 and len(np.unique(flat(shards))) == 1000


def test_deterministic_and_seed_dependent():
    a = partition(LABELS, 25, concentration=0.3, samples_per_device=100, seed=7)
    b = partition(torch.from_numpy(LABELS), 25, concentration=0.3, samples_per_device=100, seed=7)
    c = partition(LABELS, 25, concentration=0.3, samples_per_device=100, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    d = partition(LABELS, 25, concentration=0.3, seed=7)
    e = partition(LABELS, 25, concentration=0.3, seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(d, e))


@pytest.mark.parametrize("samples_per_device", [None, 100])
def test_skew_grows_as_concentration_falls(samples_per_device):
    skews = [skew(LABELS, partition(LABELS, 40, concentration=a, samples_per_device=samples_per_device, seed=0))
             for a in (100.0, 5.0, 0.3, 0.05)]
    assert skews == sorted(skews) and skews[0] < 0.2 and skews[-1] > 0.6
    assert skew(LABELS, partition(LABELS, 40, method="iid", seed=0)) < 0.2


def test_every_device_gets_a_sample_at_tiny_concentration():
    labels = np.repeat(np.arange(3), 10)  # 30 samples, 3 classes, 30 devices
    shards = partition(labels, 30, concentration=0.01, seed=0)
    assert all(len(s) == 1 for s in shards)
    assert np.array_equal(np.sort(flat(shards)), np.arange(30))


def test_label_histograms():
    labels = np.array([0, 1, 1, 2, 2, 2])
    assert label_histograms(labels, [np.array([0, 3]), np.array([1, 2, 4, 5])], 4) == [[1, 0, 1, 0], [0, 2, 2, 0]]
    with pytest.raises(ValueError):
        label_histograms(labels, [np.arange(6)], 2)


@pytest.mark.parametrize("kwargs, words", [
    (dict(num_devices=0), ["num_devices", "0"]),
    (dict(num_devices=6001), ["num_devices", "6001", "6000"]),
    (dict(num_devices=100, samples_per_device=61), ["samples_per_device", "61", "6100", "6000", "60"]),
    (dict(num_devices=10, samples_per_device=0), ["samples_per_device", "0"]),
    (dict(num_devices=10, method="shards"), ["method", "shards"]),
    (dict(num_devices=10, concentration=0.0), ["concentration", "0"]),
])
def test_impossible_requests(kwargs, words):
    n = kwargs.pop("num_devices")
    with pytest.raises(ValueError) as err:
        partition(LABELS, n, **kwargs)
    assert all(w in str(err.value) for w in words)
