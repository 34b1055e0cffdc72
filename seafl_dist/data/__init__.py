"""Datasets and partitions: everything a simulated device needs to know about its data.

    from seafl_dist.data import load_dataset, partition, label_histograms

    train = load_dataset("cifar10", root="data", train=True)      # ArrayDataset, uint8 in memory
    test = load_dataset("cifar10", root="data", train=False)
    shards = partition(train.labels, 100, method="dirichlet", concentration=5.0, seed=0)
    x, y = train.batch(torch.as_tensor(shards[0][:32]), augment=True, generator=g, device="cuda")

``load_dataset`` knows digits (bundled with scikit-learn), mnist, emnist, cifar10, cinic10, and
LEAF's femnist and shakespeare (token sequences); see :mod:`seafl_dist.data.loaders` for where
each is looked for (a missing one raises
:class:`DatasetNotFoundError`, a truncated or corrupt file :class:`DataError`) and
:mod:`seafl_dist.data.partition` for how shards are drawn.
"""
from .dataset import NORMALIZATION, ArrayDataset
from .loaders import DATASETS, DataError, DatasetNotFoundError, clear_cache, load_dataset
from .partition import METHODS, label_histograms, partition

__all__ = ["ArrayDataset", "DATASETS", "DataError", "DatasetNotFoundError", "METHODS", "NORMALIZATION", "clear_cache",
           "label_histograms", "load_dataset", "partition"]
