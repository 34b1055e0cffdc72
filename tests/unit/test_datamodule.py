"""A DataModule's samples as the run takes them (data/samples.py, data/datamodule.py): batches of any structure
collated and moved, declared labels, the rows a worker keeps, a seeded setup, the fingerprint ranks compare."""
import random
from collections import namedtuple

import numpy as np
import pytest
import torch
from torch.utils.data import Subset

from datamodules import write
from seafl_dist.data.datamodule import fingerprint, load_split, seeded
from seafl_dist.data.loaders import clear_cache, load_dataset
from seafl_dist.data.samples import SampleDataset, as_pair, declared_labels, to_device
from seafl_dist.settings import ConfigError
from seafl_dist.settings.plugins import makes_datamodule


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    import sys
    folder = tmp_path_factory.mktemp("dm")
    name = write(folder)
    sys.path.insert(0, str(folder))
    yield __import__(name), name
    sys.path.remove(str(folder))


def test_to_device_moves_every_tensor_at_any_depth_and_keeps_the_containers():
    Pair = namedtuple("Pair", "a b")
    batch = {"x": torch.ones(2), "more": [torch.zeros(1), (torch.ones(3), "tag")], "p": Pair(torch.ones(1), 7)}
    moved = to_device(batch, torch.device("meta"))
    assert moved["x"].device.type == "meta" and moved["more"][0].device.type == "meta"
    assert isinstance(moved["more"][1], tuple) and moved["more"][1][0].device.type == "meta" and moved["more"][1][1] == "tag"
    assert type(moved["p"]) is Pair and moved["p"].a.device.type == "meta" and moved["p"].b == 7


@pytest.mark.parametrize("batch, pair", [
    ((torch.zeros(3, 2), torch.tensor([0, 1, 2])), True),
    ([torch.zeros(3, 2), torch.tensor([0, 1, 2])], True),
    ((torch.zeros(3, 2), torch.tensor([0.0, 1.0, 2.0])), False),  # float targets
    ((torch.zeros(3, 2), torch.tensor([True, False, True])), False),
    ((torch.zeros(3, 2), torch.tensor([0, 1])), False),  # rows differ
    ((torch.zeros(3, 2), torch.zeros(3, 1, dtype=torch.int64)), False),  # not 1-D
    ((torch.zeros(3, 2), torch.tensor([0, 1, 2]), torch.zeros(3)), False),  # three parts
    ({"x": torch.zeros(3), "y": torch.tensor([0, 1, 2])}, False),
    ((torch.arange(3), torch.tensor([0, 1, 2])), True),  # one scalar input a row
    (([0, 1, 2], torch.tensor([0, 1, 2])), False),  # inputs that are no tensor
])
def test_as_pair_is_inputs_and_integer_labels_of_as_many_rows(batch, pair):
    assert (as_pair(batch) is not None) == pair


def test_declared_labels_come_from_the_dataset_its_datamodule_or_targets_and_follow_a_subset():
    class Rows:
        def __init__(self, n, **attrs):
            self.n = n
            self.__dict__.update(attrs)

        def __len__(self):
            return self.n

    assert list(declared_labels(Rows(3, labels=torch.tensor([2, 0, 1])))) == [2, 0, 1]
    assert list(declared_labels(Rows(3, labels=lambda: [1, 1, 0]))) == [1, 1, 0]  # a method
    assert list(declared_labels(Rows(2), owner=Rows(0, labels=np.array([3, 4])))) == [3, 4]  # the DataModule's
    assert list(declared_labels(Rows(2, targets=[5, 6]))) == [5, 6]  # torchvision's name
    assert declared_labels(Rows(2)) is None
    for bad in ([0.5, 1.0], [0, -1], [0, 1, 2], [[0], [1]]):  # floats, negative, too many, not 1-D
        assert declared_labels(Rows(2, labels=bad)) is None, bad
    parent = Rows(5, labels=np.array([0, 1, 2, 3, 4], dtype=np.int32))
    assert list(declared_labels(Subset(parent, [4, 1]))) == [4, 1]
    assert declared_labels(parent).dtype == np.int64 and declared_labels(Subset(parent, [1])).dtype == np.int64
    assert declared_labels(Subset(Rows(5), [4, 1])) is None  # a parent without labels


def test_a_batch_is_the_collate_of_the_items_and_take_keeps_rows_in_order():
    items = [{"t": torch.arange(k + 1), "label": k % 3} for k in range(6)]
    seen = []

    def collate(batch):
        seen.append([len(b["t"]) for b in batch])
        return {"n": torch.tensor([len(b["t"]) for b in batch]), "label": torch.tensor([b["label"] for b in batch])}

    ds = SampleDataset(items, collate, "x:y", labels=[k % 3 for k in range(6)])
    assert len(ds) == 6 and ds.num_classes == 3 and ds.inputs == "samples" and ds.static_shapes is False
    got = ds.batch(torch.tensor([4, 0, 2]))
    assert seen == [[5, 1, 3]] and got["n"].tolist() == [5, 1, 3] and got["label"].tolist() == [1, 0, 2]
    sub = ds.take([5, 1])
    assert len(sub) == 2 and sub.labels.tolist() == [2, 1] and sub.num_classes == 3
    assert sub.batch(torch.tensor([0, 1]))["n"].tolist() == [6, 2]
    assert ds.to("cpu") is ds and ds.augment_draws(4) == ()
    with pytest.raises(ValueError, match=r"^x:y: augmentation \(data.augment\) is for the built-in image sets; a "
                                         r"DataModule augments in its own dataset or collate$"):
        ds.batch(torch.tensor([0]), augment=True)
    bare = SampleDataset(items, collate, "x:y")
    assert bare.num_classes == 0 and bare.classes == [] and bare.labels is None  # no labels: no classes
    assert bare.take([1]).labels is None and bare.in_channels == 0 and bare.image_size == 0


def test_what_a_sample_dataset_declares_follows_it_into_the_rows_it_keeps():
    ds = SampleDataset([(torch.zeros(3, 8, 8), k) for k in range(4)], list, "i:DM", labels=np.array([0, 2, 1, 2],
                       dtype=np.int32), image_shape=torch.Size([3, 8, 8]), num_classes=5)
    assert ds.labels.dtype == torch.int64 and ds.num_classes == 5 and ds.classes == ["0", "1", "2", "3", "4"]
    assert ds.image_shape == (3, 8, 8) and ds.in_channels == 3 and ds.image_size == 8
    sub = ds.take(np.array([3, 0], dtype=np.int32))
    assert (sub.name, sub.image_shape, sub.num_classes, sub.labels.tolist()) == ("i:DM", (3, 8, 8), 5, [2, 0])
    assert [int(y) for _, y in sub.batch([1, 0])] == [0, 3]


def test_seeded_fixes_torch_numpy_and_random_and_restores_them():
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    before = (torch.random.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    with seeded(7):
        a = (torch.rand(2), np.random.rand(2), random.random())
    with seeded(7):
        b = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert torch.equal(torch.random.get_rng_state(), before[0])
    assert np.array_equal(np.random.get_state()[1], before[1]) and random.getstate() == before[2]


def test_a_datamodule_class_or_factory_is_told_apart_from_a_dataset_function(mod):
    m, _ = mod
    assert makes_datamodule(m.WordsDM) and makes_datamodule(m.words_dm)
    assert not makes_datamodule(lambda root, train: None)  # the dataset form f(root, train)
    assert not makes_datamodule(lambda x, y, z: None)  # neither form
    assert not makes_datamodule(m.Words)  # a class that binds (root, train) is taken as the dataset form


def test_the_split_is_the_same_for_a_seed_and_differs_between_seeds(mod, tmp_path):
    _, name = mod
    try:
        a = load_split(f"{name}:WordsDM", tmp_path, True, seed=0, prepare=True)
        clear_cache()
        b = load_split(f"{name}:WordsDM", tmp_path, True, seed=0, prepare=False)
        clear_cache()
        c = load_split(f"{name}:WordsDM", tmp_path, True, seed=1, prepare=False)
        assert fingerprint(a) == fingerprint(b) != fingerprint(c)
        assert a.labels.tolist() == b.labels.tolist() and len(a) == 400 and a.num_classes == 4
        test = load_dataset(f"{name}:WordsDM", tmp_path, train=False, seed=1)
        assert len(test) == 120 and test.num_classes == 4
    finally:
        clear_cache()


def test_the_fingerprint_reads_every_sample():
    base = [{"t": torch.arange(3), "label": 1, "k": torch.tensor(4)}, (torch.ones(2), 0.5, "s")]  # k: 0-d
    fp = fingerprint(SampleDataset(base, list, "a:b"))
    for changed in ([{"t": torch.arange(3), "label": 2, "k": torch.tensor(4)}, base[1]],
                    [{"t": torch.arange(3).float(), "label": 1, "k": torch.tensor(4)}, base[1]],
                    [{"t": torch.arange(3), "label": 1, "k": torch.tensor(5)}, base[1]],
                    [base[0], (torch.ones(2), 0.25, "s")],
                    [base[0], (torch.ones(2), 0.5, "t")],
                    [base[0]]):
        assert fingerprint(SampleDataset(changed, list, "a:b")) != fp
    assert fingerprint(SampleDataset(list(base), list, "a:b")) == fp


def test_a_constructor_or_hook_that_fails_is_said_in_one_line(mod, tmp_path):
    _, name = mod
    try:
        with pytest.raises(ConfigError) as err:
            load_split(f"{name}:NoLoader", tmp_path, True, seed=0, prepare=False)
        assert "\n" not in str(err.value) and "train_dataloader() failed" in str(err.value)
    finally:
        clear_cache()


def test_labels_declared_on_the_datamodule_itself_reach_the_partition_and_the_held_out_split(mod):
    """docs/datasets.md: labels are the dataset's, else its DataModule's. ``ModuleLabels``' samples are dicts of
    a training set that declares none, so only the module's own reach Dirichlet, the histograms and the
    stratified held-out split; the oracle is each sample's own ``label``."""
    from datamodules import ARGS
    from seafl_dist.runtime.setup import prepare
    from seafl_dist.settings import config_from_dict
    from small_runs import SMALL
    _, name = mod
    args = [*SMALL, *ARGS(name, "ModuleLabels"), "data.partition=dirichlet"]
    try:
        whole = prepare(config_from_dict({"name": "t"}, args))
        parts = prepare(config_from_dict({"name": "t"}, [*args, "data.device_holdout=0.25"]))
    finally:
        clear_cache()
    labels = np.array([whole.train.dataset[i]["label"] for i in range(len(whole.train))])
    assert whole.partition_report()["label_histograms"].tolist() == [
        np.bincount(labels[s], minlength=4).tolist() for s in whole.shards]
    assert sorted(np.concatenate(whole.shards).tolist()) == list(range(400))
    for shard, kept in zip(whole.shards, parts.shards):
        held = np.setdiff1d(shard, kept)
        n, h = len(shard), int(np.floor(0.25 * len(shard) + 0.5))
        assert len(held) == h and np.isin(kept, shard).all()
        for c in range(4):  # stratified: a label with g of the device's n rows has ⌊g·h/n⌋ or ⌈g·h/n⌉ held out
            g = int((labels[shard] == c).sum())
            assert int((labels[held] == c).sum()) in (g * h // n, -(-g * h // n)), (c, g, h, n)
