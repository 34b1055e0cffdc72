"""LEAF Shakespeare: files read by role into token sequences, LEAF's ids and split, the character LSTM, and the
pairings of model and data that cannot work refused in one line."""
import json
import re

import numpy as np
import pytest
import torch

from leaf_files import LETTERS, ROLES, shakespeare_object, shakespeare_samples, write_shakespeare
from one_line import one_line_message
from seafl_dist.data import DatasetNotFoundError, clear_cache, load_dataset
from seafl_dist.data.holdout import HeldOut, writer_holdout
from seafl_dist.data.leaf import DataFormatError
from seafl_dist.data.labels import sample_groups
from seafl_dist.data.natural import natural_partition
from seafl_dist.models import build_model
from seafl_dist.runtime.model_checks import check_inputs
from seafl_dist.settings import ConfigError, config_from_dict


@pytest.fixture(autouse=True)
def _fresh_cache(request):  # every test reads its own files
    clear_cache()
    request.addfinalizer(clear_cache)


def ids(text: str) -> list[int]:
    return [LETTERS.index(c) for c in text]  # LEAF's word_to_indices: ALL_LETTERS.find(c)


def test_reads_every_role_as_leafs_character_ids(tmp_path):
    made = write_shakespeare(tmp_path)
    for split in ("train", "test"):
        ds = load_dataset("shakespeare", root=tmp_path, train=split == "train")
        assert ds.inputs == "tokens" and ds.images.dtype == torch.uint8 and ds.images.shape[1:] == (80,)
        assert ds.num_classes == ds.vocab == ds.in_channels == 80 and ds.image_size == 80
        assert "".join(ds.classes) == LETTERS and ds.mean == ds.std == ()
        assert ds.writers == list(ROLES)  # file order, users order
        assert ds.offsets.tolist() == np.cumsum([0] + [n[split == "test"] for n in ROLES.values()]).tolist()
        for i, role in enumerate(ds.writers):
            xs, ys = made[split][role]
            rows = ds.writer_rows(i)
            assert ds.images[rows].tolist() == [ids(x) for x in xs]
            assert ds.labels[rows].tolist() == ids("".join(ys))
        x, y = ds.batch(torch.tensor([0, 2]))
        assert x.dtype == y.dtype == torch.int64 and x.tolist() == ds.images[[0, 2]].tolist()
        with pytest.raises(ValueError, match="augmentation .* is for images"):
            ds.batch(torch.tensor([0]), augment=True)


def test_cache_is_written_and_read_back(tmp_path, monkeypatch):
    import seafl_dist.data.shakespeare as shakespeare
    write_shakespeare(tmp_path)
    first = load_dataset("shakespeare", root=tmp_path, train=True)
    assert (tmp_path / "shakespeare" / ".train.seafl-cache.npz").exists()
    clear_cache()

    def no_parsing(path):
        raise AssertionError(f"{path} parsed although the cache holds it")
    monkeypatch.setattr(shakespeare, "read_shakespeare_file", no_parsing)
    again = load_dataset("shakespeare", root=tmp_path, train=True)
    assert torch.equal(again.images, first.images) and torch.equal(again.labels, first.labels)
    assert again.writers == first.writers and np.array_equal(again.offsets, first.offsets) and again.vocab == 80


def test_one_device_per_role_and_leafs_own_split_per_role(tmp_path):
    """data.partition: natural gives each role its training samples; data.device_test: writers gives it its own
    LEAF test samples (LEAF's -t sample split), matched by name; the sub-datasets keep the vocabulary."""
    made = write_shakespeare(tmp_path)
    train = load_dataset("shakespeare", root=tmp_path, train=True)
    test = load_dataset("shakespeare", root=tmp_path, train=False)
    shards, roles = natural_partition(sample_groups(train), None, 3, train.name)
    assert sorted(roles) == sorted(ROLES) and len(shards) == len(ROLES)
    for shard, role in zip(shards, roles):
        assert train.images[shard].tolist() == [ids(x) for x in made["train"][role][0]]
    held = writer_holdout(roles, sample_groups(test))
    for rows, role in zip(held, roles):
        assert test.labels[rows].tolist() == ids("".join(made["test"][role][1]))
    gathered = HeldOut.of(test, held, [1, 0])
    assert gathered.data.inputs == "tokens" and gathered.data.vocab == 80
    assert gathered.sizes.tolist() == [len(held[1]), len(held[0])]
    assert train.to("cpu") is train and train.like(train.images[:2], train.labels[:2]).in_channels == 80


def _one_file(tmp_path, obj, text=None):
    for split in ("train", "test"):
        (tmp_path / "shakespeare" / split).mkdir(parents=True, exist_ok=True)
        (tmp_path / "shakespeare" / split / "a.json").write_text(text if text is not None else json.dumps(obj))
    return tmp_path / "shakespeare" / "train" / "a.json"


def _broken(change):
    obj = shakespeare_object({"KING_LEAR_EDGAR": shakespeare_samples(3, 1), "HAMLET_HORATIO": shakespeare_samples(2, 2)})
    change(obj)
    return obj


def _set_x(role, j, text):
    return lambda o: o["user_data"][role]["x"].__setitem__(j, text)


@pytest.mark.parametrize("obj, text, what", [
    (_broken(_set_x("HAMLET_HORATIO", 1, "a" * 79)), None, r"role 'HAMLET_HORATIO': sample 1: x is 79 characters, "
                                                           r"expected a string of 80"),
    (_broken(_set_x("KING_LEAR_EDGAR", 0, 5)), None, r"role 'KING_LEAR_EDGAR': sample 0: x is a int, expected"),
    (_broken(lambda o: o["user_data"]["KING_LEAR_EDGAR"]["y"].__setitem__(2, "ab")), None,
     r"role 'KING_LEAR_EDGAR': sample 2: y is 'ab', expected one character"),
    (_broken(_set_x("KING_LEAR_EDGAR", 2, "a" * 5 + "|" + "a" * 74)), None,
     r"role 'KING_LEAR_EDGAR': sample 2: x\[5\] is '\|', not one of LEAF's 80 characters"),
    (_broken(lambda o: o["user_data"]["HAMLET_HORATIO"]["y"].__setitem__(1, "é")), None,
     r"role 'HAMLET_HORATIO': sample 1: y is 'é', not one of LEAF's 80 characters"),
    (_broken(lambda o: o["num_samples"].__setitem__(1, 7)), None, r"role 'HAMLET_HORATIO': num_samples says 7 but"),
    (_broken(lambda o: o["user_data"].pop("KING_LEAR_EDGAR")), None, r"role 'KING_LEAR_EDGAR': no \{x, y\} entry"),
    (None, '{"users": [', "is not valid JSON"),
    ({"users": [], "num_samples": [], "user_data": {}}, None, "files in .*shakespeare/train hold no sample"),
])
def test_bad_file_is_one_line_naming_file_role_and_sample(tmp_path, obj, text, what):
    path = _one_file(tmp_path, obj, text)
    with pytest.raises(DataFormatError) as err:
        load_dataset("shakespeare", root=tmp_path, train=True)
    message = one_line_message(str(err.value), str(path.parent if "hold no sample" in what else path))
    assert re.search(what, message), message


def test_missing_files_say_how_to_make_them(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"dataset 'shakespeare' not found: searched .*shakespeare, "
                                                   r".*shakespeare/data; .*cd leaf/data/shakespeare && ./preprocess.sh "
                                                   r"-s niid --sf 1.0 -k 0 -t sample -tf 0.8"):
        load_dataset("shakespeare", root=tmp_path, train=True)


def test_the_lstm_is_leafs_and_has_a_lightning_twin():
    torch.manual_seed(0)
    net = build_model("lstm", 80, 80, image_size=80, lightning=False)
    assert net.inputs == "tokens" and net.num_parameters() == 819_920
    assert net.embedding.weight.shape == (80, 8) and net.lstm.num_layers == 2 and net.lstm.hidden_size == 256
    assert net.lstm.batch_first and net.fc.weight.shape == (80, 256)
    x = torch.randint(0, 80, (3, 80))
    assert net(x).shape == (3, 80)
    torch.manual_seed(0)
    twin = build_model("lstm", 80, 80, image_size=80)
    assert type(twin).__mro__[1] is type(net) and twin.state_dict().keys() == net.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), net.state_dict().values()))
    assert torch.equal(twin(x), net(x))
    tiny = build_model("lstm", 80, 80, width=0.05, lightning=False)
    assert tiny.lstm.hidden_size == 13 and tiny.embedding.embedding_dim == 1


@pytest.mark.parametrize("model, data, fragments", [
    ("lenet5", "shakespeare", ["'model.name' has value 'lenet5'; allowed: lstm or an import path for "
                               "data.name=shakespeare, whose samples are character ids; lenet5 takes images"]),
    ("resnet18", "shakespeare", ["'model.name' has value 'resnet18'; allowed: lstm"]),
    ("lstm", "digits", ["'model.name' has value 'lstm'; allowed: lenet5, resnet18, vgg16 or an import path for "
                        "data.name=digits, whose samples are images; lstm takes character ids"]),
    ("lstm", "femnist", ["'model.name' has value 'lstm'", "data.name=femnist"]),
])
def test_a_model_and_data_of_different_inputs_are_refused(model, data, fragments):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"model": {"name": model}, "data": {"name": data}})
    one_line_message(str(err.value), *fragments)


def test_augment_and_a_loaded_dataset_of_the_other_kind_are_refused():
    with pytest.raises(ConfigError) as err:
        config_from_dict({"model": {"name": "lstm"}, "data": {"name": "shakespeare", "augment": True}})
    one_line_message(str(err.value), "'data.augment' has value True; allowed: false for data.name=shakespeare")
    lstm = config_from_dict({"model": {"name": "lstm"}, "data": {"name": "shakespeare"}})
    check_inputs(lstm, "tokens")
    with pytest.raises(ConfigError) as err:  # a user's loader (import path) that gives images: known once loaded
        check_inputs(lstm, "images")
    one_line_message(str(err.value), "'model.name' has value 'lstm'; allowed: lenet5, resnet18, vgg16")
    check_inputs(config_from_dict({}), "images")
    with pytest.raises(ConfigError, match="'model.name' has value 'lenet5'; allowed: lstm"):
        check_inputs(config_from_dict({}), "tokens")
