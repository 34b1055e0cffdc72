"""A Hugging Face ``datasets`` dataset as the data: ``data.name: hf:<path>`` (needs ``pip install -e ".[hf]"``).

    train = load_hf("hf:data/mnist_hf", root, train=True)                      # saved with save_to_disk
    train = load_hf("hf:parquet", root, True, files={"train": "a.parquet", "test": "b.parquet"})

Where the dataset comes from (``<path>``, what follows ``hf:``):

- with ``data.files``: ``<path>`` is a builder of the ``datasets`` library (``parquet``, ``csv``, ``json``,
  ``imagefolder``) and ``data.files`` its ``data_files`` (``{train: ..., test: ...}``; relative paths are read
  under ``data.root``);
- else a folder written by ``save_to_disk`` (a ``DatasetDict``): ``<path>`` as given, or under ``data.root``;
- else a name on the Hugging Face Hub (``datasets.load_dataset(<path>)``, cached under ``data.root/hf``; needs
  internet).

Splits: the dataset's ``train`` and ``test``, or those ``data.splits`` names. Columns (``data.columns``):
``input`` (default ``image``, else ``img``), ``label`` (default ``label``) and an optional ``group``, the
default of ``data.partition_by`` for ``data.partition: natural``. Rows are read through the dataset's own
torch formatting (``with_format("torch")``: an ``Image`` column decodes to a uint8 (C, H, W) tensor), so:

- **images** (square, uint8 or float) take the fast path of data/custom.py: one tensor in memory, class names
  from a ``ClassLabel`` label column;
- **anything else** (token ids, features) is held as a DataModule's samples are: ``(input, label)`` pairs
  batched by torch's ``default_collate``; ``data.partition_by`` reads any column.

Every rank reads the same rows in the same order (the training-set fingerprint, runtime/fetch.py, checks it for
samples). The datasets opened are kept per process (:func:`clear`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..settings import ConfigError
from ..settings.plugins import HF

EXTRA = 'pip install -e ".[hf]"'
CHUNK = 4096  # rows of an image split that one call of the dataset's torch formatting decodes (60,000 rows: 15 calls)
_OPENED: dict[tuple, dict] = {}


def datasets_library(name: str):
    """The ``datasets`` module, or one ConfigError line naming the extra that installs it."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"config key 'data.name' has value {name!r}; allowed: a built-in name or an import path, "
                          f"unless Hugging Face's datasets is installed: {EXTRA}") from None
    return datasets


def clear() -> None:
    _OPENED.clear()


def _refuse(name: str):
    return lambda problem: ConfigError(f"config key 'data.name' has value {name!r}: {problem}")


def open_splits(name: str, root: Path, files: dict | None = None) -> dict:
    """The dataset's splits by name (a ``DatasetDict``), opened once per process (module doc)."""
    key = (name, str(root), repr(files))
    if key in _OPENED:
        return _OPENED[key]
    datasets, path = datasets_library(name), name[len(HF):]
    if files is not None:
        rooted = {s: ([str(root / f) for f in v] if isinstance(v, list) else str(root / v)) for s, v in files.items()}
        try:
            made = datasets.load_dataset(path, data_files=rooted)
        except Exception as err:  # noqa: BLE001 -- the library's own words, in one line
            raise _refuse(name)(f"the builder {path!r} could not read data.files ({_said(err)}); give parquet, csv, "
                                "json or imagefolder and files that exist under data.root") from None
    else:
        local = next((p for p in (Path(path).expanduser(), root / path) if p.is_dir()), None)
        if local is not None:
            try:
                made = datasets.load_from_disk(str(local))
            except Exception as err:  # noqa: BLE001
                raise _refuse(name)(f"{local} is not a dataset saved with save_to_disk ({_said(err)})") from None
        else:  # a hub name: downloads
            try:
                made = datasets.load_dataset(path, cache_dir=str(root / "hf"))
            except Exception as err:  # noqa: BLE001
                raise _refuse(name)(f"no folder {path} (nor {root / path}) and the Hub gave nothing ({_said(err)}); "
                                    "give a save_to_disk folder, a builder with data.files, or a Hub name "
                                    "(needs internet)") from None
    if not isinstance(made, datasets.DatasetDict):
        raise _refuse(name)(f"it is one split of {len(made)} rows, not a DatasetDict of splits; save a DatasetDict "
                            "with train and test splits (or give data.files a train and a test)")
    _OPENED[key] = dict(made)
    return _OPENED[key]


def _said(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"


def split_of(name: str, root: Path, train: bool, files=None, splits=None):
    """The Hugging Face Dataset of the training (``train``) or test split (``data.splits``, else its own)."""
    opened = open_splits(name, root, files)
    role = "train" if train else "test"
    want = (splits or {}).get(role, role)
    if want not in opened:
        raise _refuse(name)(f"it has no split {want!r} (its splits: {', '.join(opened)}); name its {role} split in "
                            f"data.splits ({{{role}: <split>}})")
    return opened[want]


def columns_of(name: str, ds, columns=None) -> tuple[str, str, str | None]:
    """(input, label, group) column names (``data.columns``, else ``image`` or ``img`` and ``label``), checked."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - {"input", "label", "group"})
    if unknown:
        raise ConfigError(f"config key 'data.columns' has value {columns!r}; allowed: the keys input, label and "
                          f"group (not {', '.join(unknown)})")
    have = list(ds.column_names)
    x = columns.get("input") or next((c for c in ("image", "img") if c in have), "image")
    y, g = columns.get("label", "label"), columns.get("group")
    for role, col in (("input", x), ("label", y), ("group", g)):
        if col is not None and col not in have:
            raise ConfigError(f"config key 'data.columns' has value {columns or None!r}; allowed: columns of "
                              f"{name} (its {role} column {col!r} is not one; it has {', '.join(have)})")
    return x, y, g


class Rows(torch.utils.data.Dataset):
    """A Hugging Face Dataset's rows as ``(input, int label)`` pairs in torch's format; ``column(key)`` reads any
    column (what ``data.partition_by`` names)."""

    def __init__(self, ds, x: str, y: str):
        self.ds, self.x, self.y = ds, x, y
        self.torch = ds.with_format("torch", columns=[x, y])
        self.labels = np.asarray(ds[y], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int):
        row = self.torch[int(i)]
        return row[self.x], int(row[self.y])

    def column(self, key: str) -> list:
        if key not in self.ds.column_names:
            raise KeyError(f"{key!r} is no column; it has {', '.join(self.ds.column_names)}")
        return list(self.ds[key])


def load_hf(name: str, root: Path, train: bool, *, files=None, columns=None, splits=None,
            num_classes: int | None = None):
    """The split as an ArrayDataset (images: the fast path) or a SampleDataset (anything else); module doc."""
    from .custom import any_samples, held_images, _image_like
    ds = split_of(name, root, train, files, splits)
    x, y, _ = columns_of(name, ds, columns)
    split, refuse = "train" if train else "test", _refuse(name)
    if len(ds) == 0:
        raise refuse(f"its {split} split is empty")
    labels = np.asarray(ds[y])
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or (labels < 0).any():
        raise ConfigError(f"config key 'data.columns' has value {columns!r}; allowed: a label column of integers "
                          f">= 0 (its label column {y!r} of {name} is not)")
    feature = ds.features[y]
    classes = list(getattr(feature, "names", None) or [])
    rows = Rows(ds, x, y)
    first = rows[0][0]
    # torch's formatting widens integer arrays to int64: an Array2D/Array3D declared uint8 is uint8 pixels again
    narrow = getattr(ds.features[x], "dtype", None) == "uint8"
    if isinstance(first, torch.Tensor) and narrow:
        first = first.to(torch.uint8)
    if isinstance(first, torch.Tensor) and _image_like(first, batched=False):
        try:
            images = torch.cat([_channels(rows.torch[i:i + CHUNK][x], narrow) for i in range(0, len(ds), CHUNK)])
        except RuntimeError as err:  # images of several shapes or dtypes
            raise refuse(f"its {split} split's images are not all of one shape ({_said(err)}); resize them with "
                         "the dataset's map before saving") from None
        data = held_images(name, split, images, torch.from_numpy(labels.astype(np.int64)), classes, num_classes,
                           refuse)
        data.hf_split = ds  # what a Flower partitioner is handed (data/flower.py)
        data.field = rows.column  # what data.partition_by (or data.columns' group) reads (data/labels.py)
        return data
    data = any_samples(name, split, rows, num_classes if num_classes is not None else (len(classes) or None), refuse)
    if classes and len(classes) == data.num_classes:
        data.classes = [str(c) for c in classes]
    return data


def _channels(batch, narrow: bool = False) -> torch.Tensor:
    """A formatted batch of images as (N, C, H, W): a stacked tensor, or a list of (C, H, W) / (H, W) ones;
    ``narrow``: declared uint8 (widened by the formatting), made uint8 again."""
    t = batch if isinstance(batch, torch.Tensor) else torch.stack(list(batch))
    t = t.to(torch.uint8) if narrow else t
    return t.unsqueeze(1) if t.dim() == 3 else t
