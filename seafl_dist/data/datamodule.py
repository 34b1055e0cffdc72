"""A LightningDataModule as the data: ``data.name: mypkg.data:MyDataModule`` (or a factory returning one).

    train, test = load_datamodule("mypkg.data:DM", root, seed=0, prepare=True)   # two SampleDatasets

What is called, in Lightning's order, and what is taken from it:

1. **The DataModule.** A LightningDataModule class is instantiated with no argument, or with ``data.root`` as
   its ``data_dir`` (or ``root``) when its ``__init__`` has such a parameter; a factory (any other callable
   of no required argument, or of ``data_dir`` / ``root``) is called the same way and must return one.
2. ``prepare_data()`` once per node, before the node's other ranks go on (runtime/fetch.py's once-per-node
   path; one process: once). It may download; the other ranks then read what it wrote.
3. ``setup("fit")`` then ``train_dataloader()``, and ``setup("test")`` then ``test_dataloader()`` (else
   ``val_dataloader()``), on every rank. Each runs under a forked random state of torch, numpy and ``random``,
   seeded with ``data.seed``: a ``random_split`` in ``setup`` gives every rank the same
   split, and the run's own streams are left as they were. A fingerprint of the training set (every sample's
   bytes, in order) is compared across ranks (runtime/distributed.py); a mismatch stops the run in one line.
4. **The training set** is the ``dataset`` of ``train_dataloader()``'s DataLoader; the partition shares out its
   rows. Every device's batches are built by that DataLoader's ``collate_fn``, ``train.batch_size`` rows at a
   time in the job's own order (the DataLoader's batch size, sampler and workers are not used: a device's batch
   is a pure function of its job, on any rank). The test set is the evaluation DataLoader's dataset, batched
   by its own ``collate_fn``; a module with a ``test_step`` (or ``validation_step``) evaluates by it.
5. **Labels**, where declared (data/samples.py ``declared_labels``), or read from samples that are
   ``(x, int label)`` pairs.

Refused in one line naming the hook: a DataModule whose ``train_dataloader`` (or evaluation loader) raises or
gives no DataLoader with a dataset; an ``IterableDataset`` (a stream cannot be shared out by index: wrap its
samples in a map-style Dataset); an empty split.
"""
from __future__ import annotations

import hashlib
import random
from contextlib import contextmanager

import numpy as np
import torch

from ..settings.plugins import is_datamodule_class, makes_datamodule, plugin_error, resolve, root_kwargs
from .samples import SampleDataset, sample_dataset

_MODULES: dict[tuple, object] = {}  # (path, root, seed) -> the set-up DataModule's (train, test), per process


def is_datamodule_path(path: str) -> bool:
    """Whether ``data.name``'s callable makes a DataModule (a LightningDataModule class, or a factory of no data
    argument) rather than a dataset ``f(root, train)``."""
    return makes_datamodule(resolve("data.name", path))


@contextmanager
def seeded(seed: int):
    """torch's, numpy's and ``random``'s global generators seeded with ``seed`` for the block, restored after."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def load_split(path: str, root, train: bool, *, seed: int, prepare: bool) -> SampleDataset:
    """The training (``train``) or test split of the DataModule ``path`` names, as a SampleDataset (module doc).
    ``prepare``: this process runs ``prepare_data`` (one per node). The DataModule is made, prepared and set up for
    each stage once per process; the test stage only where a test split is asked for (rank 0)."""
    key = (path, str(root), int(seed))
    if key not in _MODULES:
        _MODULES[key] = _Loaded(path, str(root), int(seed), prepare)
    return _MODULES[key].train if train else _MODULES[key].test()


def clear() -> None:
    """Forget every DataModule made (data/loaders.py ``clear_cache``)."""
    _MODULES.clear()


class _Loaded:
    """One DataModule, prepared and set up for "fit"; its test split made on first use."""

    def __init__(self, path: str, root: str, seed: int, prepare: bool):
        self.path, self.seed = path, seed
        fn = resolve("data.name", path)
        try:
            self.dm = fn(**root_kwargs(fn.__init__ if isinstance(fn, type) else fn, root))
        except Exception as err:  # noqa: BLE001 -- the user's constructor, said in one line
            raise plugin_error("data.name", path, f"making the DataModule failed: {_said(err)}") from None
        if not is_datamodule_class(type(self.dm)):
            raise plugin_error("data.name", path, f"it returned {type(self.dm).__name__}, not a LightningDataModule")
        if prepare:
            _call(path, self.dm, "prepare_data")
        with seeded(seed):
            _call(path, self.dm, "setup", "fit")
            self.train = _split(path, self.dm, "train_dataloader")
        self._test = None

    def test(self) -> SampleDataset:
        if self._test is None:
            hook = next((h for h in ("test_dataloader", "val_dataloader") if _overrides(self.dm, h)), None)
            if hook is None:
                raise plugin_error("data.name", self.path, "it has neither test_dataloader nor val_dataloader; the "
                                                           "central evaluation needs one")
            with seeded(self.seed):
                _call(self.path, self.dm, "setup", "test")
                self._test = _split(self.path, self.dm, hook, num_classes=self.train.num_classes)
        return self._test


def _overrides(dm, hook: str) -> bool:
    """Whether ``dm``'s class defines ``hook`` below LightningDataModule (found in its bases: not imported here)."""
    base = next(c for c in type(dm).__mro__ if is_datamodule_class(c) and c.__name__ == "LightningDataModule")
    return getattr(type(dm), hook, None) is not getattr(base, hook, None)


def _said(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:300]}"


def _call(path: str, dm, hook: str, *args):
    try:
        return getattr(dm, hook)(*args)
    except Exception as err:  # noqa: BLE001 -- the user's hook, said in one line
        raise plugin_error("data.name", path, f"its {hook}({', '.join(map(repr, args))}) failed: {_said(err)}") from None


def _split(path: str, dm, hook: str, num_classes: int | None = None) -> SampleDataset:
    """The dataset and collate of the DataLoader ``hook`` returns, checked, as a SampleDataset."""
    from torch.utils.data import IterableDataset
    from torch.utils.data.dataloader import default_collate
    loader = _call(path, dm, hook)
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise plugin_error("data.name", path, f"its {hook} returned {type(loader).__name__}, not a DataLoader with "
                                              "a dataset")
    if isinstance(dataset, IterableDataset):
        raise plugin_error("data.name", path, f"its {hook}'s dataset is an IterableDataset "
                                              f"({type(dataset).__name__}): devices take samples by index, and a "
                                              "stream cannot be shared out; wrap its samples in a map-style Dataset")
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise plugin_error("data.name", path, f"its {hook}'s dataset ({type(dataset).__name__}) has no "
                                              "__getitem__ and __len__")
    if len(dataset) == 0:
        raise plugin_error("data.name", path, f"its {hook}'s dataset is empty")
    collate = getattr(loader, "collate_fn", None) or default_collate
    return sample_dataset(dataset, collate, path, owner=dm, num_classes=num_classes)


def fingerprint(data: SampleDataset) -> str:
    """A digest of every sample of ``data``, in order: its tensors' dtypes, shapes and bytes, its other values'
    reprs. Two ranks whose DataModules split differently give different digests."""
    h = hashlib.sha256()

    def feed(x) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-d: reshaped
        elif isinstance(x, np.ndarray):
            h.update(f"{x.dtype}{x.shape}".encode() + np.ascontiguousarray(x).tobytes())
        elif isinstance(x, (tuple, list)):
            h.update(b"(")
            for v in x:
                feed(v)
            h.update(b")")
        elif isinstance(x, dict):
            h.update(b"{")
            for k in x:
                h.update(repr(k).encode())
                feed(x[k])
            h.update(b"}")
        else:
            h.update(repr(x).encode())

    for i in range(len(data)):
        feed(data.dataset[i])
    return h.hexdigest()
