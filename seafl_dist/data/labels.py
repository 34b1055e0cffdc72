"""What a split may stratify by: a dataset's class labels, or none.

    labels = class_labels(train)        # (N,) int64 numpy array, or None

The one place that says whether a dataset "has labels" for the purposes of a split (the per-device
hold-out, data/holdout.py; any later split that stratifies): a 1-D integer ``labels`` of one entry a
row. Every built-in dataset and every loader of data/custom.py has them today; a dataset whose rows
carry no class (regression targets, unlabelled or multi-label rows) answers None, and a split then
draws without stratifying.
"""
from __future__ import annotations

import numpy as np


def class_labels(dataset) -> np.ndarray | None:
    """``dataset.labels`` as a 1-D int64 numpy array when they are one integer class a row, else None."""
    labels = getattr(dataset, "labels", None)
    if labels is None:
        return None
    if hasattr(labels, "detach"):  # a torch tensor
        labels = labels.detach().cpu().numpy()
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        return None
    return labels.astype(np.int64, copy=False)
