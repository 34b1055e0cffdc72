"""FEMNIST read from tiny files in LEAF's real JSON format, and the natural (one device per writer) split."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from seafl_dist.data import DatasetNotFoundError, clear_cache, load_dataset
from seafl_dist.data.femnist import DataFormatError, WriterDataset
from seafl_dist.data.labels import sample_groups
from seafl_dist.data.natural import natural_partition
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import ConfigError, config_from_dict
from seafl_dist.sim import stream_seed

from leaf_files import WRITERS, leaf_object, leaf_samples, write_leaf
from one_line import one_error_line, one_line_message


@pytest.fixture(autouse=True)
def _fresh_cache(request):  # every test reads its own files
    clear_cache()
    request.addfinalizer(clear_cache)


def test_reads_every_writer_as_exact_uint8(tmp_path):
    made = write_leaf(tmp_path)
    for split, train in (("train", True), ("test", False)):
        ds = load_dataset("femnist", root=tmp_path, train=train)
        assert isinstance(ds, WriterDataset) and ds.name == "femnist"
        assert (ds.num_classes, ds.in_channels, ds.image_size) == (62, 1, 28)
        assert ds.images.dtype == torch.uint8 and ds.classes[:3] == ["0", "1", "2"] and ds.classes[-1] == "z"
        assert ds.writers == list(WRITERS)  # file order, then each file's users order
        for i, w in enumerate(ds.writers):
            x, y = made[split][w]
            rows = torch.as_tensor(ds.writer_rows(i))
            assert torch.equal(ds.images[rows].reshape(-1, 784), torch.from_numpy(x))  # round(x*255) is exact
            assert ds.labels[rows].tolist() == y.tolist()
        assert len(ds) == sum(n[split == "test"] for n in WRITERS.values())


def test_cache_is_written_and_read_back(tmp_path, monkeypatch):
    import os

    import seafl_dist.data.femnist as femnist
    write_leaf(tmp_path)
    first = load_dataset("femnist", root=tmp_path, train=True)
    assert (tmp_path / "femnist" / ".train.seafl-cache.npz").exists()
    clear_cache()

    def no_parsing(path):
        raise AssertionError(f"{path} parsed although the cache holds it")
    monkeypatch.setattr(femnist, "read_leaf_file", no_parsing)
    again = load_dataset("femnist", root=tmp_path, train=True)
    assert torch.equal(again.images, first.images) and torch.equal(again.labels, first.labels)
    assert again.writers == first.writers and np.array_equal(again.offsets, first.offsets)
    clear_cache()
    cache = tmp_path / "femnist" / ".train.seafl-cache.npz"
    with np.load(cache) as z:
        kept = dict(z)
    np.savez(cache, **{**kept, "images": kept["images"][:-1]})  # a cache that does not hold what it says
    with pytest.raises(AssertionError, match="parsed although"):
        load_dataset("femnist", root=tmp_path, train=True)
    np.savez(cache, **kept)
    changed = tmp_path / "femnist" / "train" / "all_data_0_niid_1_keep_0_train_9.json"
    os.utime(changed, ns=(0, changed.stat().st_mtime_ns + 10**9))  # a file changed: the cache no longer answers
    with pytest.raises(AssertionError, match="parsed although"):
        load_dataset("femnist", root=tmp_path, train=True)


def test_leaf_tree_as_data_root_and_skipped_writers(tmp_path):
    """data.root = leaf/data finds femnist/data/{train,test}; by-sample split leftovers are skipped."""
    tree = tmp_path / "femnist" / "data"
    for split, n in (("train", 3), ("test", 1)):
        (tree / split).mkdir(parents=True)
        obj = leaf_object({"w1": leaf_samples(n, 1), "w2": leaf_samples(n, 2)})
        obj["user_data"]["too_few"] = {"x": [], "y": []}  # in user_data, not in users: as LEAF leaves it
        (tree / split / f"all_data_0_{split}_9.json").write_text(json.dumps(obj))
    ds = load_dataset("femnist", root=tmp_path, train=True)
    assert ds.writers == ["w1", "w2"] and len(ds) == 6


def test_natural_partition_one_device_per_writer(tmp_path):
    write_leaf(tmp_path)
    ds = load_dataset("femnist", root=tmp_path, train=True)
    shards, names = natural_partition(sample_groups(ds), None, 7, ds.name)
    assert sorted(names) == sorted(WRITERS) and len(shards) == 5
    for shard, name in zip(shards, names):
        assert shard.tolist() == ds.writer_rows(ds.writers.index(name)).tolist()
    first3, names3 = natural_partition(sample_groups(ds), 3, 7, ds.name)
    assert names3 == names[:3] and all(np.array_equal(a, b) for a, b in zip(first3, shards))
    assert natural_partition(sample_groups(ds), None, 8, ds.name)[1] != names  # the order is seeded
    with pytest.raises(ConfigError, match="'devices.num' has value 6; allowed: at most the 5 writers"):
        natural_partition(sample_groups(ds), 6, 7, ds.name)
    digits = load_dataset("digits", train=True)
    with pytest.raises(ConfigError, match="'data.partition' has value 'natural'.*digits has no writers"):
        natural_partition(sample_groups(digits), None, 0, digits.name)


def _config(root, **data):
    return config_from_dict({"devices": {"num": data.pop("num", None), "concurrency": data.pop("m", 2)},
                             "algorithm": {"buffer_size": 1},
                             "data": {"name": "femnist", "root": str(root), "partition": "natural", "seed": 3, **data}})


def test_prepare_resolves_devices_num_null_to_the_writers(tmp_path):
    write_leaf(tmp_path)
    exp = prepare(_config(tmp_path))
    ds = exp.train
    assert exp.num_devices == 5 and exp.cfg.devices.num is None  # the config stays as written
    order = np.random.default_rng(stream_seed(3, "partition")).permutation(5)
    assert exp.writers == [ds.writers[w] for w in order]
    assert [len(s) for s in exp.shards] == [WRITERS[w][0] for w in exp.writers]
    assert len(exp.test) == sum(n for _, n in WRITERS.values())  # every writer's test samples
    rec = exp.partition_report()
    assert rec["method"] == "natural" and rec["concentration"] is None and rec["writers"] == exp.writers
    assert rec["label_histograms"].sum(axis=1).tolist() == rec["n_samples"].tolist()
    assert prepare(_config(tmp_path, num=2)).writers == exp.writers[:2]
    with pytest.raises(ConfigError, match="'devices.concurrency' has value 6; allowed: at most the 5 devices"):
        prepare(_config(tmp_path, m=6))


DP = {"enabled": True, "noise_multiplier": 1.0}


def test_under_dp_a_test_set_holding_the_devices_own_writers_is_refused_in_one_line(tmp_path):
    """LEAF's -t sample split (every writer in both files, as write_leaf makes them): the central evaluation would
    score the released model on the devices' own held-out samples without noise (issue 60 D)."""
    write_leaf(tmp_path)
    with pytest.raises(ConfigError) as err:
        prepare(config_from_dict({**_config(tmp_path, num=2).to_dict(), "privacy": DP}))
    one_line_message(str(err.value), f"config key 'data.root' has value {str(tmp_path)!r}", "with privacy.enabled=true",
                     "2 of the 2 devices' groups", "femnist's test files", "-t user")
    assert prepare(_config(tmp_path, num=2)).test is not None  # without DP: the same files, as before


def test_under_dp_a_test_set_of_other_writers_and_a_split_that_is_not_by_writer_pass(tmp_path):
    """-t user: whole writers in one split, so no device's writer is in the test files; and a dirichlet split of
    FEMNIST, whose devices are no writers (docs/privacy.md, "Assumptions and limits")."""
    write_leaf(tmp_path / "user", {"f0000_14": (5, 0), "f0001_41": (3, 0), "f0002_07": (4, 0), "f0003_33": (0, 2),
                                   "f0004_28": (0, 3)})
    exp = prepare(config_from_dict({**_config(tmp_path / "user").to_dict(), "privacy": DP}))
    assert exp.num_devices == 3 and len(exp.test) == 5 and not set(exp.writers) & {"f0003_33", "f0004_28"}
    write_leaf(tmp_path / "sample")
    cfg = config_from_dict({**_config(tmp_path / "sample", num=2, partition="dirichlet").to_dict(), "privacy": DP})
    assert prepare(cfg).writers is None


@pytest.mark.parametrize("data, message", [
    ({"name": "digits"}, "'data.partition' has value 'natural'; allowed: dirichlet, iid or an import path for "
                         "data.name=digits: natural makes each writer a device and digits has no writers"),
    ({"partition": "dirichlet"}, "'devices.num' has value None; allowed: an integer >= 1; null (one device per "
                                 "writer) only with data.partition=natural, not dirichlet"),
    ({"samples_per_device": 4}, "'data.samples_per_device' has value 4; allowed: null with data.partition=natural"),
])
def test_config_checks(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _config(tmp_path, **data)


def _one_file(tmp_path, obj, text=None):
    for split in ("train", "test"):
        (tmp_path / "femnist" / split).mkdir(parents=True, exist_ok=True)
        (tmp_path / "femnist" / split / "a.json").write_text(text if text is not None else json.dumps(obj))
    return tmp_path / "femnist" / "train" / "a.json"


def _good():
    return leaf_object({"w1": leaf_samples(2, 1), "w2": leaf_samples(2, 2)})


def _broken(change):
    obj = _good()
    change(obj)
    return obj


@pytest.mark.parametrize("obj, text, what", [
    (_broken(lambda o: o.pop("user_data")), None, r"has no user_data \(LEAF's format has users, num_samples"),
    (_broken(lambda o: o["user_data"]["w2"]["x"][1].pop()), None,
     r"writer 'w2': sample 1: x has 783 values, expected 784"),
    (_broken(lambda o: o["user_data"]["w1"]["y"].__setitem__(0, 62)), None,
     r"writer 'w1': sample 0: label 62 is not an integer in 0..61"),
    (_broken(lambda o: o["user_data"]["w1"]["y"].__setitem__(1, 3.0)), None,
     r"writer 'w1': sample 1: label 3.0 is not an integer"),
    (_broken(lambda o: o["user_data"]["w2"]["x"][0].__setitem__(5, 1.5)), None,
     r"writer 'w2': sample 0: pixel 5 is 1.5, outside \[0, 1\]"),
    (_broken(lambda o: o["user_data"].pop("w2")), None, r"writer 'w2': no \{x, y\} entry in user_data"),
    (_broken(lambda o: o["num_samples"].__setitem__(0, 3)), None, r"writer 'w1': num_samples says 3 but"),
    (None, '{"users": [', "is not valid JSON"),
    (None, "[1, 2]", "holds a JSON list, expected an object"),
    ({"users": [], "num_samples": [], "user_data": {}}, None, "files in .*femnist/train hold no sample"),
])
def test_malformed_file_is_one_line_naming_file_and_writer(tmp_path, obj, text, what):
    path = _one_file(tmp_path, obj, text)
    with pytest.raises(DataFormatError) as err:
        load_dataset("femnist", root=tmp_path, train=True)
    message = str(err.value)
    named = path.parent if "hold no sample" in what else path  # an empty split names its folder
    assert str(named) in message and "\n" not in message
    assert re.search(what, message), message


def test_missing_files_and_duplicate_writers(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"dataset 'femnist' not found: searched .*femnist, .*femnist/data; "
                                                   r"expected train/\*.json and test/\*.json .*preprocess.sh"):
        load_dataset("femnist", root=tmp_path, train=True)
    write_leaf(tmp_path)
    folder = tmp_path / "femnist" / "train"
    (folder / "zz.json").write_text(json.dumps(leaf_object({"f0001_41": leaf_samples(1, 0)})))
    with pytest.raises(DataFormatError, match=r"zz.json: writer 'f0001_41' is also in all_data_0_"):
        load_dataset("femnist", root=tmp_path, train=True)


def test_the_refusal_is_the_runs_and_the_dry_runs_one_error_line(tmp_path):
    import in_process
    write_leaf(tmp_path / "leaf")
    args = ["run", "quickstart", "data.name=femnist", f"data.root={tmp_path / 'leaf'}", "data.partition=natural",
            "devices.num=null", "devices.concurrency=2", "algorithm.buffer_size=1", "privacy.enabled=true",
            "privacy.noise_multiplier=1", "--out", tmp_path / "run"]
    for extra in (["--dry-run"], []):
        done = in_process.seafl(*args, *extra)
        assert done.returncode == 2
        one_error_line(done.stderr, "config key 'data.root'", "5 of the 5 devices' groups", "-t user")
