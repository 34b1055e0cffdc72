"""Samples of any structure, batched by their own collate: the data of a LightningDataModule.

    ds = SampleDataset(train_set, collate_fn, name="mydata:DM")        # what data/datamodule.py builds
    batch = ds.batch(torch.tensor([0, 5, 9]), device="cuda")           # collate([ds[0], ds[5], ds[9]]) on the GPU

The built-in datasets are one tensor of images or token ids (data/dataset.py's ArrayDataset), batched by
indexing. A DataModule's samples may be anything its DataLoader's ``collate_fn`` takes: tensors of any rank,
variable-length token lists that the collate pads, tuples, dicts. A :class:`SampleDataset` keeps the
map-style dataset and that collate, and serves a batch as the DataLoader would have: the items ``idx``
collated, then every tensor in the result (in tuples, lists and dicts, at any depth) moved to the device.

It answers what the rest of the run asks of a dataset, or says "none":

- ``labels``: one integer class per row where they are declared (:func:`declared_labels`), else None.
  With None, a partition that needs labels (Dirichlet) is refused in one line, the per-device hold-out
  draws without stratifying, the partition report has no label histograms and the divergence rule has
  no chance level (report/divergence.py).
- ``num_classes``: the largest declared label + 1 (0 without labels); ``in_channels`` / ``image_size``: an
  image sample's channels and side, else 0 (what a user's model builder is given).
- ``inputs``: ``"samples"``: a built-in model (images or token ids) is refused for it in one line.
- ``take(rows)``: the rows a worker keeps (a view, no copy); ``to(device)``: itself (batches move one by one).
- ``field(key)``: every sample's value under ``key`` (``data.partition_by``: the labels or groups a partition
  reads, data/labels.py), read once and kept.

It holds no augmentation: a DataModule augments in its own dataset or collate (``data.augment`` is refused).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from ..settings import ConfigError


def to_device(batch, device: torch.device):
    """``batch`` with every tensor in it (tuples, lists, dicts, at any depth) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple keeps its type
        return type(batch)(*(to_device(b, device) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def as_pair(batch) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(x, y)`` when ``batch`` is a pair of a tensor and a 1-D integer label tensor of as many rows (what the
    built-in loss and evaluation take), else None."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        return None
    x, y = batch
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or y.dim() != 1 or x.dim() < 1:
        return None
    if y.is_floating_point() or y.dtype == torch.bool or len(x) != len(y):
        return None
    return x, y


def declared_labels(dataset, owner=None) -> np.ndarray | None:
    """One integer class per row of ``dataset`` (an (N,) int64 array), where declared: a ``labels`` attribute
    (or method) of the dataset, else of ``owner`` (its DataModule), else ``targets`` (torchvision's name);
    a ``torch.utils.data.Subset`` (what ``random_split`` makes) reads its parent's at its indices. None when
    none is declared or what is there is not one integer a row."""
    from torch.utils.data import Subset
    if isinstance(dataset, Subset):
        parent = declared_labels(dataset.dataset)
        return None if parent is None else parent[np.asarray(dataset.indices, dtype=np.int64)]
    for source, attr in ((dataset, "labels"), (owner, "labels"), (dataset, "targets")):
        got = getattr(source, attr, None) if source is not None else None
        if callable(got):
            got = got()
        if got is None:
            continue
        got = np.asarray(got.detach().cpu() if isinstance(got, torch.Tensor) else got)
        if got.ndim == 1 and len(got) == len(dataset) and np.issubdtype(got.dtype, np.integer) and (got >= 0).all():
            return got.astype(np.int64, copy=False)
    return None


def sample_dataset(dataset, collate, name: str, *, owner=None, num_classes: int | None = None) -> "SampleDataset":
    """``dataset`` (map-style, not empty) and ``collate`` as a SampleDataset: its labels where declared
    (:func:`declared_labels`, ``owner`` its DataModule) or read from ``(x, int label)`` samples, and the
    image shape of ``(image (C, H, W) square, label)`` samples (what a user's model builder is told)."""
    labels, image_shape = declared_labels(dataset, owner), None
    first = dataset[0]
    if isinstance(first, (tuple, list)) and len(first) == 2 and isinstance(first[0], torch.Tensor) \
            and first[0].dim() == 3 and first[0].shape[-1] == first[0].shape[-2]:
        image_shape = tuple(first[0].shape)
    if labels is None:
        labels = pair_labels(dataset)
    return SampleDataset(dataset, collate, name, labels=labels, image_shape=image_shape, num_classes=num_classes)


def pair_labels(dataset) -> np.ndarray | None:
    """Every sample's label when the samples are ``(x, int label)`` pairs (a 0-d integer tensor counts), else None."""
    out = np.empty(len(dataset), dtype=np.int64)
    for i in range(len(dataset)):
        item = dataset[i]
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            return None
        y = item[1]
        if isinstance(y, torch.Tensor) and y.dim() == 0 and not (y.is_floating_point() or y.is_complex()
                                                                 or y.dtype == torch.bool):
            y = int(y)
        elif isinstance(y, np.ndarray) and y.ndim == 0 and np.issubdtype(y.dtype, np.integer):
            y = int(y)
        if isinstance(y, bool) or not isinstance(y, (int, np.integer)) or y < 0:
            return None
        out[i] = int(y)
    return out


def field_value(sample, key: str):
    """``sample``'s value under ``key``: a dict's entry, a tuple's or list's position (``key`` ``"0"``, ``"1"``, ...),
    an object's attribute; a 0-d tensor or numpy scalar as a Python scalar. KeyError where there is none."""
    if isinstance(sample, Mapping):
        value = sample[key] if key in sample else _missing(sample)
    elif isinstance(sample, (tuple, list)) and not hasattr(sample, "_fields"):
        value = sample[int(key)] if key.isdigit() and int(key) < len(sample) else _missing(sample)
    elif hasattr(sample, key):  # a namedtuple's or a dataclass's field
        value = getattr(sample, key)
    else:
        value = _missing(sample)
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _missing(sample):
    if isinstance(sample, Mapping):
        has = f"its keys are {sorted(map(str, sample))}"
    elif isinstance(sample, (tuple, list)) and not hasattr(sample, "_fields"):
        has = f"it is a {type(sample).__name__} of {len(sample)}: positions 0 to {len(sample) - 1}"
    else:
        has = f"it is a {type(sample).__name__}"
    raise KeyError(has)


class _Rows:
    """The rows ``rows`` of a map-style dataset, by position (a view: nothing is copied)."""

    def __init__(self, dataset, rows: np.ndarray):
        self.dataset, self.rows = dataset, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        return self.dataset[int(self.rows[i])]


class SampleDataset:
    """A map-style dataset and its collate, served in batches by index (module doc)."""

    inputs = "samples"
    static_shapes = False  # a collate may pad to each batch's longest row: no CUDA graph slots (runtime/executor.py)

    def __init__(self, dataset, collate, name: str, *, labels: np.ndarray | None = None, image_shape=None,
                 num_classes: int | None = None):
        self.dataset, self.collate, self.name = dataset, collate, name
        self.labels = None if labels is None else torch.as_tensor(labels, dtype=torch.int64)
        self.image_shape = tuple(image_shape) if image_shape else None  # (C, H, W) of an image sample, else None
        self.num_classes = num_classes if num_classes is not None else (
            int(self.labels.max()) + 1 if self.labels is not None and len(self.labels) else 0)
        self.classes = [str(k) for k in range(self.num_classes)]
        self._fields: dict[str, list] = {}

    def __len__(self) -> int:
        return len(self.dataset)

    def __repr__(self) -> str:
        return f"SampleDataset({self.name!r}, n={len(self)}, classes={self.num_classes})"

    @property
    def in_channels(self) -> int:
        return self.image_shape[0] if self.image_shape else 0

    @property
    def image_size(self) -> int:
        return self.image_shape[-1] if self.image_shape else 0

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def to(self, device) -> "SampleDataset":
        return self

    def take(self, rows) -> "SampleDataset":
        """The rows ``rows`` (positions), in that order, as a SampleDataset of the same collate."""
        rows = np.asarray(rows, dtype=np.int64)
        labels = None if self.labels is None else self.labels.numpy()[rows]
        return SampleDataset(_Rows(self.dataset, rows), self.collate, self.name, labels=labels,
                             image_shape=self.image_shape, num_classes=self.num_classes)

    def field(self, key: str) -> list:
        """Every sample's value under ``key`` (:func:`field_value`), in row order; ConfigError naming the first sample
        that has none."""
        column = getattr(self.dataset, "column", None)  # a Hugging Face dataset's rows (data/hf.py): read at once
        if key not in self._fields and column is not None:
            try:
                self._fields[key] = [v.item() if isinstance(v, np.generic) else v for v in column(key)]
            except KeyError as err:
                raise ConfigError(f"config key 'data.partition_by' has value {key!r}; allowed: a column of "
                                  f"{self.name} ({err.args[0]})") from None
        if key not in self._fields:
            values = []
            for i in range(len(self.dataset)):
                try:
                    values.append(field_value(self.dataset[i], key))
                except KeyError as err:
                    raise ConfigError(f"config key 'data.partition_by' has value {key!r}; allowed: a key of every "
                                      f"sample of {self.name}: sample {i} has none ({err.args[0]})") from None
            self._fields[key] = values
        return self._fields[key]

    @staticmethod
    def augment_draws(n: int, generator=None) -> tuple:
        return ()

    def batch(self, idx, *, augment: bool = False, generator=None, device="cpu", draws=None):
        """The items ``idx`` collated, as the DataLoader would batch them, on ``device``."""
        if augment:
            raise ValueError(f"{self.name}: augmentation (data.augment) is for the built-in image sets; a "
                             "DataModule augments in its own dataset or collate")
        items = [self.dataset[int(i)] for i in torch.as_tensor(idx, dtype=torch.int64).tolist()]
        return to_device(self.collate(items), torch.device(device))
