"""data.download=true under torchrun: only local rank 0 of a node downloads; the node's other ranks
wait for it (a key in a real c10d store) and then load from disk. Ranks are threads here; the
"download" is a function that writes the files, or the real CIFAR-10 loader with the files present."""
import threading
import time

import pytest
import torch.distributed as dist

from fake_datasets import write_cifar
from seafl_dist.data import DatasetNotFoundError, clear_cache, load_dataset
from seafl_dist.runtime.fetch import DownloadFailed, once_per_node


def ranks(n, body):
    """Run body(local_rank) in n threads; return {local_rank: result or exception}."""
    out = {}

    def run(r):
        try:
            out[r] = body(r)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            out[r] = err

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in reversed(threads):  # followers first: they must wait, not find nothing
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_only_local_rank_zero_downloads_and_the_others_load_after_it(tmp_path):
    store, calls, marker = dist.HashStore(), [], tmp_path / "dataset.bin"

    def load(download):
        calls.append((download, time.monotonic()))
        if download:
            time.sleep(0.5)  # a slow download
            marker.write_bytes(b"x" * 100)
        assert marker.exists(), "a rank loaded before the download finished"
        return marker.stat().st_size

    out = ranks(4, lambda r: once_per_node(load, store=store, node=0, local_rank=r, root=tmp_path, timeout_s=30))
    assert out == {0: 100, 1: 100, 2: 100, 3: 100}
    assert sorted(d for d, _ in calls) == [False, False, False, True]  # one download, three loads from disk
    download_at = next(t for d, t in calls if d)
    assert all(t >= download_at + 0.45 for d, t in calls if not d)
    assert (tmp_path / ".seafl-download.lock").exists()


def test_a_failed_download_stops_the_waiting_ranks_with_one_line(tmp_path):
    store = dist.HashStore()

    def load(download):
        if download:
            raise DatasetNotFoundError("dataset 'cifar10' not found: no internet")
        raise AssertionError("a follower must not try to load after a failed download")

    out = ranks(3, lambda r: once_per_node(load, store=store, node=2, local_rank=r, root=tmp_path, timeout_s=30))
    assert isinstance(out[0], DatasetNotFoundError)
    for r in (1, 2):
        assert isinstance(out[r], DownloadFailed)
        msg = str(out[r])
        assert "\n" not in msg and "local rank 0 of node 2" in msg and "DatasetNotFoundError" in msg


def test_with_the_files_present_every_rank_loads_cifar10_from_disk(tmp_path):
    write_cifar(tmp_path, per_batch=4)
    store = dist.HashStore()
    clear_cache()
    try:
        out = ranks(3, lambda r: once_per_node(lambda dl: load_dataset("cifar10", tmp_path, train=True, download=dl),
                                                store=store, node=0, local_rank=r, root=tmp_path, timeout_s=30))
    finally:
        clear_cache()
    assert all(len(out[r]) == 20 for r in range(3)), out
