"""What a split may stratify or group by: a dataset's class labels or none, its groups or none.

    labels = class_labels(train)                  # (N,) int64 numpy array, or None
    labels = class_labels(train, key="topic")     # each sample's "topic", a non-negative integer
    groups = sample_groups(train)                 # a WriterDataset's writers (FEMNIST, Shakespeare), or None
    groups = sample_groups(train, key="speaker")  # samples grouped by their "speaker"
    rows = groups.rows(3)                         # group 3's rows (groups.names[3] names it)

The one place that answers the two questions every split asks of a dataset, for every dataset: the partition
(runtime/setup.py ``make_shards``: Dirichlet and a user's split read labels, ``natural`` reads groups), the
per-device hold-out (data/holdout.py: stratified by labels; ``data.device_test: writers`` matches the test
set's groups by name) and the partition record (label histograms where there are labels).

**Labels** (``key`` None): the dataset's ``labels``, one non-negative integer a row: every built-in set, every
loader of data/custom.py, and a DataModule's dataset that declares them (data/samples.py ``declared_labels``).
**Groups** (``key`` None): the writers of a dataset that knows them (``writers`` and ``offsets``: a LEAF
WriterDataset, or the dry run's DataCheck of one).

**A key** (``data.partition_by``) reads each sample's value under it instead: a DataModule's samples
(data/samples.py ``SampleDataset.field``) that are dicts (the key), tuples or lists (a position, ``"0"``,
``"1"``, ...) or objects (an attribute). Labels from a key must be non-negative integers (a 0-d integer
tensor counts); a group is any value, named by its ``str``, and groups are ordered by name. A dataset of
images and labels (a built-in set, a loader's arrays) has no samples to read a key from, and is refused.

None means "none": a split that needs labels (Dirichlet) is refused in one line, the hold-out draws without
stratifying and the record has no histograms; ``natural`` without groups is refused in one line.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings import ConfigError


@dataclass
class Groups:
    """Rows grouped: group ``g`` (``names[g]``) holds rows ``order[offsets[g]:offsets[g + 1]]``."""

    names: list[str]
    order: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    def rows(self, g: int) -> np.ndarray:
        """Group ``g``'s rows, ascending."""
        return self.order[self.offsets[g]:self.offsets[g + 1]]


def keys(d) -> tuple[str | None, str | None]:
    """(the label key, the group key) the data section ``d`` names: ``data.partition_by`` is the group key of a
    ``natural`` partition and the label key of any other."""
    key = getattr(d, "partition_by", None)
    if key is None and d.partition == "natural":  # a Hugging Face dataset's group column (data/hf.py)
        key = (getattr(d, "columns", None) or {}).get("group")
    return (None, key) if d.partition == "natural" else (key, None)


def class_labels(dataset, key: str | None = None) -> np.ndarray | None:
    """Each row's class, an (N,) int64 numpy array, or None (module doc). ``key``: read from the samples."""
    if key is not None:
        values = _field(dataset, key)
        bad = next((i for i, v in enumerate(values) if isinstance(v, bool) or not isinstance(v, (int, np.integer))
                    or v < 0), None)
        if bad is not None:
            raise ConfigError(f"config key 'data.partition_by' has value {key!r}; allowed: a key whose value is a "
                              f"non-negative integer class in every sample of {dataset.name} (the labels of "
                              f"data.partition=dirichlet): sample {bad}'s is {_short(values[bad])}")
        return np.asarray(values, dtype=np.int64)
    labels = getattr(dataset, "labels", None)
    if labels is None:
        return None
    if hasattr(labels, "detach"):  # a torch tensor
        labels = labels.detach().cpu().numpy()
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        return None
    return labels.astype(np.int64, copy=False)


def sample_groups(dataset, key: str | None = None) -> Groups | None:
    """The rows of ``dataset`` by group (module doc), or None where it has none."""
    if key is None:
        writers, offsets = getattr(dataset, "writers", None), getattr(dataset, "offsets", None)
        if not writers or offsets is None:
            return None
        offsets = np.asarray(offsets, dtype=np.int64)  # the rows run writer after writer: rows() are offsets' spans
        return Groups(list(writers), np.arange(offsets[-1], dtype=np.int64), offsets)
    names = np.asarray([str(v) for v in _field(dataset, key)])
    unique, code = np.unique(names, return_inverse=True)  # every name in ``unique`` has a sample: no empty group
    return Groups([str(u) for u in unique], np.argsort(code, kind="stable").astype(np.int64),  # stable: rows ascend
                  np.concatenate([[0], np.cumsum(np.bincount(code))]).astype(np.int64))


def _field(dataset, key: str) -> list:
    field = getattr(dataset, "field", None)
    if field is None:
        raise ConfigError(f"config key 'data.partition_by' has value {key!r}; allowed: null for data.name="
                          f"{dataset.name}: its samples are arrays of images or tokens and their labels, with no key "
                          "to read (a LightningDataModule's samples have)")
    return field(key)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
