"""Check a dataset on disk without loading it: formats and sizes only (``seafl run --dry-run``).

    found = check_dataset(cfg.data, cfg.data_seed)   # a DataCheck: training labels, shape, classes, sizes

Where :func:`~seafl_dist.data.loaders.load_dataset` reads everything (and may download, gunzip an
IDX file in place or write a decoded cache), this reads only what a partition needs and what
proves the files are whole, and writes nothing. Each check is the loader's own, so a bad file is
the same one-line :class:`~seafl_dist.data.missing.DataError` here as in the run:

- mnist / emnist: each IDX file's header, and its size against the shape the header announces
  (:func:`~seafl_dist.data.idx.peek_idx`; a file there only gzipped is decompressed in memory and
  counted, not unpacked); the labels are read (60 KB) and checked against the images' count.
- cifar10: each batch's pickle opcodes are walked (:func:`~seafl_dist.data.safepickle.walk_pickle`:
  nothing is imported, called or built but plain data), which finds a truncated file; the fields
  are checked as the loader checks them (:func:`~seafl_dist.data.cifar.check_batch`).
- cinic10: the class folders are listed (the labels are the folders), and the first and last PNG
  of each class are decoded as the loader decodes every one; the decoded cache is not built.
- femnist, shakespeare: every JSON file is parsed and checked as the run parses it (or its fresh
  cache read), the writers (roles) give the shards of ``data.partition: natural``; the cache is not
  written.
- digits and datasets named by import path are loaded as the run loads them (digits is bundled;
  a user's loader is the user's code, and calling it is the only way to check it).

A dataset missing from ``data.root`` with ``data.download=true`` is not fetched: the check says
the run will download it, and has no labels to partition.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..settings import ConfigError
from ..settings.data import HF
from ..settings.plugins import is_import_path
from .cifar import META, TEST, TRAIN, check_batch, check_meta
from .cinic import CINIC_DIRS, _cinic_present, list_pngs, load_cinic10, read_png
from .idx import check_pair, peek_idx, read_labels
from .missing import DataError, not_found
from .safepickle import NUMPY_ARRAYS, walk_pickle


@dataclass
class DataCheck:
    """What :func:`check_dataset` found. ``labels`` is ``None`` when the run will download the set;
    ``writers`` and ``offsets`` (FEMNIST, Shakespeare) group the training rows by writer, as a WriterDataset does;
    ``shape`` is ``(C, H, W)`` for images and ``(L,)`` for token sequences of a ``vocab``-word vocabulary."""
    name: str
    where: str
    labels: np.ndarray | None = None
    num_classes: int = 0
    shape: tuple = ()  # (C, H, W) of one image, (L,) of one token sequence
    n_test: int | None = None
    note: str = ""
    writers: list[str] | None = None
    offsets: np.ndarray | None = None
    vocab: int = 0
    samples: tuple | None = None  # a DataModule: its (train, test) SampleDatasets, set up (prepare_data not run)
    test: object | None = None  # FEMNIST, Shakespeare: the test split, for the DP check (runtime/setup.py)

    @property
    def inputs(self) -> str:
        """``"images"``, ``"tokens"`` or ``"samples"``, as :attr:`~seafl_dist.data.dataset.ArrayDataset.inputs`."""
        return "samples" if self.samples else "tokens" if len(self.shape) == 1 else "images"


def check_dataset(d, seed: int) -> DataCheck:
    """Check the dataset of the config section ``d`` (:class:`~seafl_dist.settings.DataConfig`); ``seed``
    is the data seed (digits' split depends on it)."""
    try:
        return _check(d, Path(d.root).expanduser().resolve(), seed)
    except OSError as err:
        if isinstance(err, FileNotFoundError) and not err.filename:  # DatasetNotFoundError: its own message
            raise
        raise DataError(f"{err.filename or d.root} cannot be read: {err.strerror or err}; check the path "
                        f"and its permissions (data.root={d.root})") from None


def _check(d, root: Path, seed: int) -> DataCheck:
    if is_import_path(d.name) or d.name == "digits" or d.name.startswith(HF):
        return _loaded(d, root, seed)
    if d.name == "mnist":
        return _idx_set("mnist", root / "MNIST" / "raw", "train", "t10k", 10, d.download)
    if d.name == "emnist":
        from torchvision.datasets import EMNIST  # the classes of each split (its names: settings' EMNIST_SPLITS)
        prefix = f"emnist-{d.emnist_split}"
        return _idx_set("emnist", root / "EMNIST" / "raw", f"{prefix}-train", f"{prefix}-test",
                        len(EMNIST.classes_split_dict[d.emnist_split]), d.download)
    if d.name == "cifar10":
        return _cifar(root / "cifar-10-batches-py", d.download)
    if d.name == "cinic10":
        return _cinic(root, d.download)
    if d.name in ("femnist", "shakespeare"):
        return _leaf(d.name, root, d.download)
    from .loaders import DATASETS
    raise ConfigError(f"config key 'data.name' has value {d.name!r}; allowed: {', '.join(DATASETS)}, or an import "
                      f"path pkg.module:fn")


def _loaded(d, root: Path, seed: int) -> DataCheck:
    from .loaders import load_dataset
    common = dict(download=False, seed=seed, test_fraction=d.test_fraction, emnist_split=d.emnist_split,
                      files=d.files, columns=d.columns, splits=d.splits)
    train = load_dataset(d.name, root, train=True, **common)
    test = load_dataset(d.name, root, train=False, **common)
    if train.inputs == "samples":  # a LightningDataModule (data/datamodule.py, set up, prepare_data not run) or a
        from .datamodule import is_datamodule_path  # loader's samples of any shape (data/custom.py)
        return DataCheck(train.name, "a Hugging Face dataset" if d.name.startswith(HF) else "a LightningDataModule"
                         if is_datamodule_path(d.name) else "a user's loader",
                         num_classes=train.num_classes, n_test=len(test), samples=(train, test))
    return DataCheck(train.name, "bundled with scikit-learn" if d.name == "digits" else "a Hugging Face dataset"
                     if d.name.startswith(HF) else "a user's loader",
                     train.labels.numpy(), train.num_classes, tuple(train.images.shape[1:]), len(test),
                     vocab=train.vocab)


def _will_download(name: str, where: Path, missing: list[str], classes: int, shape: tuple) -> DataCheck:
    shown = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
    return DataCheck(name, str(where), num_classes=classes, shape=shape,
                     note=f"not on disk ({shown} missing); data.download=true: the run downloads it (not checked)")


def _idx_set(name: str, raw: Path, train: str, test: str, classes: int, download: bool) -> DataCheck:
    """MNIST / EMNIST: the loader's checks of each split's pair of IDX files, from their headers."""
    files = [raw / f"{p}-{kind}-ubyte" for p in (train, test) for kind in ("images-idx3", "labels-idx1")]
    missing = [p.name for p in files if not p.exists() and not p.with_name(p.name + ".gz").exists()]
    if missing:
        if download:
            return _will_download(name, raw, missing, classes, (1, 28, 28))
        raise not_found(name, raw, [p.name for p in files],
                        "put the files there (gzipped or not; see seafl_dist/data/loaders.py)")
    counts, labels = {}, {}
    for split in (train, test):  # the run's order: images, labels, then the two against each other
        images_path, labels_path = raw / f"{split}-images-idx3-ubyte", raw / f"{split}-labels-idx1-ubyte"
        shape = peek_idx(images_path, 3)
        labels[split] = read_labels(labels_path)
        check_pair(images_path, shape, labels_path, labels[split], classes)
        counts[split] = shape[0]
    return DataCheck(name, str(raw), labels[train], classes, (1, 28, 28), counts[test])


def _cifar(base: Path, download: bool) -> DataCheck:
    """CIFAR-10: each batch's opcodes walked and its fields checked as the loader checks them."""
    expected = TRAIN + TEST + [META]
    missing = [f for f in expected if not (base / f).exists()]
    if missing:
        if download:
            return _will_download("cifar10", base, missing, 10, (3, 32, 32))
        raise not_found("cifar10", base, expected, f"unpack cifar-10-python.tar.gz into {base.parent}")

    def labels_of(name: str) -> np.ndarray:
        return check_batch(base / name, walk_pickle(base / name, allow=NUMPY_ARRAYS))[1]

    labels = np.concatenate([labels_of(f) for f in TRAIN])
    check_meta(base / META, walk_pickle(base / META, allow=NUMPY_ARRAYS))
    return DataCheck("cifar10", str(base), labels, 10, (3, 32, 32), len(labels_of(TEST[0])))


def _cinic(root: Path, download: bool) -> DataCheck:
    """CINIC-10: the class folders listed, the first and last PNG of each class decoded."""
    bases = [root / d if d else root for d in CINIC_DIRS]
    found = {split: next((b for b in bases if _cinic_present(b / split)), None) for split in ("train", "test")}
    if None in found.values():
        if download:
            missing = [f"{split}/" for split, base in found.items() if base is None]
            return _will_download("cinic10", bases[0], missing, 10, (3, 32, 32))
        load_cinic10(root, found["train"] is None, False)  # its own not-found error; nothing is written
    counts = {}
    for split, base in found.items():
        files = list_pngs(base / split)
        for c, names in files:
            for name in {names[0], names[-1]}:
                read_png(base / split / c / name)
        counts[split] = [len(names) for _, names in files]
    labels = np.repeat(np.arange(10, dtype=np.int64), counts["train"])  # the loader's order: class, then file name
    cached = (found["train"] / ".train.seafl-cache.npz").exists()
    note = "" if cached else "no decoded cache yet: the run's first load decodes every PNG and writes it"
    return DataCheck("cinic10", str(found["train"]), labels, 10, (3, 32, 32), sum(counts["test"]), note)


def _leaf(name: str, root: Path, download: bool) -> DataCheck:
    """FEMNIST or Shakespeare: both splits read as the run reads them (every JSON file parsed, or a fresh
    cache), without writing the cache."""
    from .femnist import femnist_folder, load_femnist
    from .shakespeare import load_shakespeare, shakespeare_folder
    folder, load = (femnist_folder, load_femnist) if name == "femnist" else (shakespeare_folder, load_shakespeare)
    base = folder(root, download)
    train = load(root, True, download, write_cache=False)
    test = load(root, False, download, write_cache=False)
    cached = (base / ".train.seafl-cache.npz").exists()
    who = "writers" if name == "femnist" else "roles"
    note = f"{len(train.writers)} {who}" + ("" if cached else "; no cache yet: the run's first load parses the "
                                                              "JSON files and writes it")
    return DataCheck(name, str(base), train.labels.numpy(), train.num_classes, tuple(train.images.shape[1:]),
                     len(test), note, writers=train.writers, offsets=train.offsets, vocab=train.vocab, test=test)
