"""``data.download=true`` on a cluster: one download per node, the node's other ranks wait.

Under torchrun every rank prepares its own data. Had each one downloaded, W ranks would
fetch the same archive into the same folder at once. Instead local rank 0 of each node
(torchrun's ``LOCAL_RANK``, node ``GROUP_RANK``) downloads, holding a file lock in
``data.root`` so that nodes sharing a filesystem fetch one at a time (the later ones find
the files there), then sets a key in the run's c10d store; the node's other ranks wait for
that key and load from disk without downloading. A failed download sets the key too, so
the waiting ranks stop at once with a line that points at local rank 0's error.
"""
from __future__ import annotations

import contextlib
import datetime
import os
from pathlib import Path


class DownloadFailed(RuntimeError):
    """Local rank 0 of this node could not get the dataset."""


@contextlib.contextmanager
def _root_lock(root):
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        fd = os.open(Path(root) / ".seafl-download.lock", os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:  # a read-only root: nothing will be written there either
        yield
        return
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def once_per_node(load, *, store, node: int, local_rank: int, root, timeout_s: float = 86400.0):
    """``load(download)``: ``load(True)`` on local rank 0, ``load(False)`` on the node's other
    ranks once local rank 0 is done. ``store`` is the run's c10d store, shared by every rank."""
    key = f"seafl/download/node{node}"
    if local_rank == 0:
        try:
            with _root_lock(root):
                result = load(True)
        except BaseException as err:
            store.set(key, f"failed: {type(err).__name__}")
            raise
        store.set(key, "ok")
        return result
    store.wait([key], datetime.timedelta(seconds=timeout_s))
    status = store.get(key).decode()
    if status != "ok":
        raise DownloadFailed(f"data.download: local rank 0 of node {node} could not get the dataset ({status}); "
                             f"its error says why")
    return load(False)


def same_training_set(data, *, store, rank: int, world_size: int, timeout_s: float = 600.0) -> None:
    """A DataModule's training set (data/samples.py ``SampleDataset``; the built-in sets are files, read alike) is
    the same on every rank: each rank posts its fingerprint (data/datamodule.py) in the run's c10d store and
    compares it with rank 0's (rank 0: with every rank's). A mismatch stops the run in one line: the DataModule's
    ``setup`` split differently (a generator of its own, or data that differ between nodes)."""
    from seafl_dist.data.datamodule import fingerprint
    from seafl_dist.settings import ConfigError
    if world_size < 2 or getattr(data, "inputs", None) != "samples":
        return
    mine = fingerprint(data)
    store.set(f"seafl/data/fingerprint/{rank}", mine)
    others = range(1, world_size) if rank == 0 else [0]
    keys = [f"seafl/data/fingerprint/{r}" for r in others]
    store.wait(keys, datetime.timedelta(seconds=timeout_s))
    for r, key in zip(others, keys):
        theirs = store.get(key).decode()
        if theirs != mine:
            a, b = (mine, theirs) if rank == 0 else (theirs, mine)
            raise ConfigError(f"config key 'data.name' has value {data.name!r}: its training set differs between rank 0 "
                              f"and rank {max(r, rank)} (fingerprints {a[:12]} and {b[:12]}); its setup must split "
                              "alike on every rank: draw from torch's global generator (seeded from data.seed "
                              "there), not a generator of its own, and read the same files")
