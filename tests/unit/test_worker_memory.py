"""A worker keeps only the training rows its devices use (rank 0: none); the whole set is freed.

benchmarks/memory.py measures what this saves on CIFAR-10-sized data (docs/performance.md, "Memory")."""
import weakref

import numpy as np
import torch

from seafl_dist.settings import load_config
from seafl_dist.data.loaders import _CACHE
from seafl_dist.runtime.setup import keep_only, prepare
from small_runs import QUICKSTART


def test_keep_only_holds_just_the_workers_rows_and_frees_the_full_set():
    exp = prepare(load_config(QUICKSTART, ["devices.num=6", "devices.concurrency=3", "algorithm.buffer_size=2"]), need_test=False)
    full = weakref.ref(exp.train)
    n_samples, shards = exp.n_samples, [s.copy() for s in exp.shards]
    expected = {d: exp.train.images[torch.as_tensor(shards[d])].clone() for d in (1, 4)}
    small = keep_only(exp, [1, 4])
    del exp
    assert full() is None, "the whole training set is still referenced"
    assert not _CACHE  # the loader cache let go of it too
    assert len(small.train) == len(shards[1]) + len(shards[4])
    assert small.n_samples == n_samples  # the clock still knows every device's n_k
    for d in (1, 4):
        assert torch.equal(small.train.images[small.shard(d)], expected[d])
    assert [len(s) for d, s in enumerate(small.shards) if d not in (1, 4)] == [0] * 4
    server = keep_only(small, [])  # rank 0 trains nothing
    assert len(server.train) == 0 and server.train.num_classes == 10


def test_overlapping_shards_keep_each_row_once():
    """data.shards_overlap: a worker holding every device keeps each training row once, not once per shard."""
    exp = prepare(load_config(QUICKSTART, ["devices.num=4", "devices.concurrency=2", "algorithm.buffer_size=2"]), need_test=False)
    rows = np.arange(0, 40)
    exp.shards = [rows, rows[10:30], rows[::-1].copy(), rows[5:6]]  # overlapping, one reversed
    expected = {d: exp.train.images[torch.as_tensor(s)].clone() for d, s in enumerate(exp.shards)}
    small = keep_only(exp, range(4))
    assert len(small.train) == 40
    for d in range(4):
        assert torch.equal(small.train.images[small.shard(d)], expected[d])  # same rows, same order


def test_a_worker_that_needs_every_row_keeps_the_set_without_a_copy():
    """Balanced placement on shards that cover the training set: no second copy, not even briefly."""
    exp = prepare(load_config(QUICKSTART, ["devices.num=4", "devices.concurrency=2", "algorithm.buffer_size=2",
                                           "data.partition=iid"]), need_test=False)
    n = len(exp.train)
    exp.shards = [np.arange(d, n, 4) for d in range(4)]  # every row in some shard
    images, shards = exp.train.images, [s.copy() for s in exp.shards]
    small = keep_only(exp, range(4))
    assert small.train.images is images
    assert all(np.array_equal(a, b) for a, b in zip(small.shards, shards))
