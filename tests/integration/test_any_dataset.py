"""Any map-style Dataset from ``f(root, train)`` (issue 54 A): samples that are not images take a DataModule's
path (data/custom.py ``any_samples``, data/samples.py): the token Dataset of (LongTensor[80], int) trains an
Embedding + LSTM LightningModule end to end; dict samples are split by a key of theirs; a ``collate_fn``
attribute batches them; and what cannot work is refused in one line that says what would."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from one_line import one_line_message
from seafl_dist.data import clear_cache, load_dataset
from seafl_dist.data.samples import SampleDataset
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import ConfigError, config_from_dict
from small_runs import QUICKSTART, SMALL
from token_datasets import ARGS, write


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokens")
    sys.path.insert(0, str(folder))
    clear_cache()
    yield folder, write(folder)
    sys.path.remove(str(folder))
    clear_cache()


def rows(n, seed):
    """Chars' windows, made here as the test's own copy: 80 ids in [0, 20) a row."""
    return torch.randint(0, 20, (n, 80), generator=torch.Generator().manual_seed(seed))


def test_the_token_dataset_trains_an_lstm_through_f_root_train(mod, tmp_path):
    folder, name = mod
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *ARGS(name),
                           "--out", str(tmp_path / "r")], env=env, cwd=folder, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["best"] > 0.5  # 4 classes: chance is 0.25
    part = json.loads((tmp_path / "r" / "partition.json").read_text())
    labels = (rows(400, 0)[:, -1] % 4).numpy()  # Dirichlet from the pairs' labels
    assert part["method"] == "dirichlet" and part["dataset"] == f"{name}:chars"
    assert np.sum(part["label_histograms"], axis=0).tolist() == np.bincount(labels, minlength=4).tolist()


def test_token_samples_are_held_as_samples_and_images_keep_the_fast_path(mod):
    _, name = mod
    for fn in ("chars", "char_arrays"):  # a Dataset of pairs, or a pair of arrays of rows that are no images
        train = load_dataset(f"{name}:{fn}", "data", train=True)
        assert isinstance(train, SampleDataset) and train.inputs == "samples" and train.num_classes == 4
        x, y = train.batch(torch.tensor([3, 0, 7]))
        assert torch.equal(x, rows(400, 0)[[3, 0, 7]]) and torch.equal(y, rows(400, 0)[[3, 0, 7], -1] % 4)
        assert train.labels.tolist() == (rows(400, 0)[:, -1] % 4).tolist()
        assert len(load_dataset(f"{name}:{fn}", "data", train=False)) == 120
    padded = load_dataset(f"{name}:padded", "data", train=True)  # its collate_fn: rows of 3 and 4 ids, padded
    x, y = padded.batch(torch.tensor([0, 1]))
    assert x.tolist() == [[0, 1, 2, 0], [0, 1, 2, 3]] and y.tolist() == [0, 1]


def test_dict_samples_are_split_by_a_key_of_theirs(mod):
    _, name = mod
    cfg = config_from_dict({"name": "t"}, [*SMALL, *ARGS(name, "talk", "dict_lstm"), "data.partition=natural",
                                           "data.partition_by=speaker", "devices.num=null", "devices.concurrency=3",
                                           "run.target_metric=test_acc"])
    exp = prepare(cfg)
    speakers = ["ann", "bo", "cy", "di", "ed", "flo"]  # sample i's is speakers[7 i mod 6] = speakers[i mod 6]
    want = {speakers[k]: [i for i in range(400) if i % 6 == k] for k in range(6)}
    assert sorted(exp.writers) == speakers
    assert {w: s.tolist() for w, s in zip(exp.writers, exp.shards)} == want
    assert exp.eval_names == ["test_acc"]


@pytest.mark.parametrize("fn, fragment", [
    ("ragged", "its train split's samples 0 and 1 cannot be batched by torch's default_collate"),
    ("stream", "its train split is an IterableDataset (Stream)"),
    ("test_label_out_of_range", "item 5 of its test split has label 7, outside the 4 classes [0, 4)"),
    ("pair_test_label_out_of_range", "item 5 of its test split has label 7, outside the 4 classes [0, 4)"),
])
def test_what_cannot_work_is_refused_in_one_line_saying_what_would(mod, fn, fragment):
    _, name = mod
    cfg = config_from_dict({"name": "t"}, [*SMALL, *ARGS(name, fn)])
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    fix = {"ragged": "give the dataset a collate_fn attribute", "stream": "return a map-style Dataset"}.get(
        fn, "of the training split; give the test split only those labels, or both splits a classes list")
    one_line_message(str(err.value), f"config key 'data.name' has value '{name}:{fn}'", fragment, fix)


def test_a_built_in_model_is_refused_for_token_samples(mod):
    _, name = mod
    cfg = config_from_dict({"name": "t"}, [*SMALL, f"data.name={name}:chars", "model.name=lenet5"])
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    one_line_message(str(err.value), "config key 'model.name' has value 'lenet5'", "an import path",
                     "of any structure")
