"""The one interface for "labels or none, groups or none" (data/labels.py, issue 39 B.3): labels and groups read
from a dataset's declarations or from a key of its samples, for dict, tuple and attribute samples; every sample
that lacks the key or carries a value that is no class is named in one line; a dataset of arrays has no key."""
import re
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seafl_dist.data import ArrayDataset
from seafl_dist.data.labels import Groups, class_labels, keys, sample_groups
from seafl_dist.data.natural import natural_partition
from seafl_dist.data.samples import SampleDataset, field_value
from seafl_dist.settings import ConfigError, config_from_dict

Said = namedtuple("Said", "x who")
SPEAKERS = ["jo", "ann", "jo", "bo", "ann", "jo", 7, "bo"]  # a group may be any value: 7 is named "7"


class Counted(list):
    """A list of samples that counts the samples read."""

    reads = 0

    def __getitem__(self, i):
        Counted.reads += 1
        return super().__getitem__(i)


def samples(kind: str):
    xs = [torch.full((i % 3 + 1,), i) for i in range(len(SPEAKERS))]
    if kind == "dict":
        items = [{"x": x, "who": s, "topic": i % 3} for i, (x, s) in enumerate(zip(xs, SPEAKERS))]
    elif kind == "tuple":
        items = [(x, torch.tensor(i % 3), s) for i, (x, s) in enumerate(zip(xs, SPEAKERS))]
    else:
        items = [Said(x, s) for x, s in zip(xs, SPEAKERS)]
    return SampleDataset(Counted(items), list, "t:DM")


@pytest.mark.parametrize("kind, label_key, group_key", [("dict", "topic", "who"), ("tuple", "1", "2"),
                                                        ("attribute", None, "who")])
def test_labels_and_groups_come_from_a_key_of_dict_tuple_and_attribute_samples(kind, label_key, group_key):
    data = samples(kind)
    if label_key is not None:
        labels = class_labels(data, label_key)
        assert labels.dtype == np.int64 and labels.tolist() == [i % 3 for i in range(len(SPEAKERS))]
    groups = sample_groups(data, group_key)
    assert groups.names == ["7", "ann", "bo", "jo"]  # named by str, ordered by name
    for g, name in enumerate(groups.names):
        assert groups.rows(g).tolist() == [i for i, s in enumerate(SPEAKERS) if str(s) == name]
    assert sorted(groups.order.tolist()) == list(range(len(SPEAKERS))) and groups.offsets[-1] == len(SPEAKERS)


def test_a_groups_rows_ascend_and_labels_are_int64_however_many_samples():
    rng = np.random.default_rng(0)
    who, topic = rng.integers(0, 3, 5000), rng.integers(0, 7, 5000).astype(np.int32)
    data = SampleDataset([{"who": f"s{w}", "topic": t} for w, t in zip(who, topic)], list, "t:DM")
    groups = sample_groups(data, "who")
    assert groups.order.dtype == np.int64 and groups.offsets.dtype == np.int64
    for g in range(3):
        assert groups.rows(g).tolist() == np.flatnonzero(who == g).tolist()  # ascending: a stable grouping
    labels = class_labels(data, "topic")
    assert labels.dtype == np.int64 and labels.tolist() == topic.tolist()
    assert class_labels(type("D", (), {"labels": topic})()).dtype == np.int64  # declared int32: as int64


def test_a_key_is_read_once_per_dataset():
    data = samples("dict")
    Counted.reads = 0
    class_labels(data, "topic"), sample_groups(data, "who"), sample_groups(data, "who"), class_labels(data, "topic")
    assert Counted.reads == 2 * len(SPEAKERS)  # one pass per key, however often it is asked


@pytest.mark.parametrize("kind, key, said", [
    ("dict", "speaker", "sample 0 has none (its keys are ['topic', 'who', 'x'])"),
    ("tuple", "3", "sample 0 has none (it is a tuple of 3: positions 0 to 2)"),
    ("tuple", "who", "sample 0 has none (it is a tuple of 3: positions 0 to 2)"),
    ("attribute", "topic", "sample 0 has none (it is a Said)"),
])
def test_a_key_a_sample_lacks_is_refused_naming_the_sample(kind, key, said):
    for read in (class_labels, sample_groups):
        with pytest.raises(ConfigError) as err:
            read(samples(kind), key)
        assert str(err.value) == (f"config key 'data.partition_by' has value {key!r}; allowed: a key of every sample "
                                  f"of t:DM: {said}")


@pytest.mark.parametrize("value, shown", [("a", "'a'"), ("b" * 58, "'" + "b" * 58 + "'"), ("c" * 59, "'" + "c" * 56 + "..."), (-1, "-1"), (True, "True"),
                                          (1.0, "1.0"),
                                          (torch.tensor([1, 2]), "tensor([1, 2])"), (torch.tensor(0.5), "0.5")])
def test_labels_from_a_key_are_non_negative_integers(value, shown):
    data = SampleDataset([{"y": 0}, {"y": value}], list, "t:DM")
    with pytest.raises(ConfigError, match=r"'data.partition_by' has value 'y'; allowed: a key whose value is a "
                                          r"non-negative integer class in every sample of t:DM .*: sample 1's is " +
                                          re.escape(shown) + "$"):
        class_labels(data, "y")


def test_integer_scalars_of_numpy_and_torch_count_as_labels():
    data = SampleDataset([{"y": np.int16(2)}, {"y": torch.tensor(0)}, {"y": 5}], list, "t:DM")
    assert class_labels(data, "y").tolist() == [2, 0, 5]
    assert field_value({"y": torch.tensor(3)}, "y") == 3 and isinstance(field_value({"y": np.int8(3)}, "y"), int)


def test_a_dataset_of_arrays_has_no_key_to_read():
    ds = ArrayDataset(torch.zeros(4, 1, 2, 2, dtype=torch.uint8), torch.tensor([0, 1, 0, 1]), 2, "arrays", (0.0,),
                      (1.0,))
    assert class_labels(ds).tolist() == [0, 1, 0, 1] and sample_groups(ds) is None
    for read in (class_labels, sample_groups):
        with pytest.raises(ConfigError, match=re.escape(
                "config key 'data.partition_by' has value 'who'; allowed: null for data.name=arrays: its samples are "
                "arrays of images or tokens and their labels, with no key to read (a LightningDataModule's samples "
                "have)")):
            read(ds, "who")


def test_without_a_key_groups_are_a_datasets_writers():
    groups = sample_groups(type("W", (), {"writers": ["w1", "w2"], "offsets": np.array([0, 3, 5])})())  # no len
    assert groups.names == ["w1", "w2"] and groups.rows(0).tolist() == [0, 1, 2] and groups.rows(1).tolist() == [3, 4]
    assert sample_groups(object()) is None
    assert sample_groups(type("E", (), {"writers": [], "offsets": np.zeros(1)})()) is None


@pytest.mark.parametrize("partition, expected", [("natural", (None, "who")), ("dirichlet", ("who", None)),
                                                 ("iid", ("who", None)), ("pkg.mod:split", ("who", None))])
def test_partition_by_is_the_group_key_of_natural_and_the_label_key_of_the_others(partition, expected):
    d = SimpleNamespace(partition=partition, partition_by="who")
    assert keys(d) == expected
    assert keys(SimpleNamespace(partition=partition, partition_by=None)) == (None, None)
    assert keys(SimpleNamespace(partition=partition)) == (None, None)  # a section without the key: none


def test_a_natural_partition_by_a_key_is_seeded_and_each_device_one_group():
    data = samples("dict")
    groups = sample_groups(data, "who")
    shards, names = natural_partition(groups, None, 5, data.name, "who")
    assert sorted(names) == groups.names
    for shard, name in zip(shards, names):
        assert shard.tolist() == [i for i, s in enumerate(SPEAKERS) if str(s) == name]
    first, first_names = natural_partition(groups, 2, 5, data.name, "who")
    assert first_names == names[:2] and all(np.array_equal(a, b) for a, b in zip(first, shards))
    orders = {tuple(natural_partition(groups, None, seed, data.name, "who")[1]) for seed in range(8)}
    assert len(orders) > 1  # the order is the seed's
    with pytest.raises(ConfigError, match=r"^config key 'devices.num' has value 5; allowed: at most the 4 groups of "
                                          r"data.partition_by=who of t:DM with data.partition=natural, or null"):
        natural_partition(groups, 5, 5, data.name, "who")
    with pytest.raises(ConfigError, match="natural makes each writer a device and t:DM has no writers.*name their "
                                          "group key in data.partition_by"):
        natural_partition(None, None, 5, data.name)
    assert natural_partition(groups, 4, 5, data.name, "who")[1] == names  # exactly as many devices as groups


@pytest.mark.parametrize("overrides, said", [
    (["data.partition=iid"], "null with data.partition=iid (it reads no labels or groups)"),
    (["data.name=mnist", "data.partition=dirichlet"], "null for data.name=mnist: its labels and writers are its own"),
    (["data.name=femnist", "data.partition=natural"], "null for data.name=femnist: its labels and writers are its own"),
    (["data.name=digits", "data.partition=dirichlet"], "null for data.name=digits"),
])
def test_partition_by_is_refused_where_it_cannot_be_read(overrides, said):
    with pytest.raises(ConfigError, match=r"^config key 'data.partition_by' has value 'who'; allowed: " + re.escape(said)):
        config_from_dict({}, [*overrides, "data.partition_by=who"])


def test_groups_rows_are_a_slice_of_the_order():
    g = Groups(["a", "b"], np.array([4, 0, 2]), np.array([0, 1, 3]))
    assert len(g) == 2 and g.rows(0).tolist() == [4] and g.rows(1).tolist() == [0, 2]
