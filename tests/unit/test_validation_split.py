"""The server's validation split (``data.validation``, data/holdout.py): a stratified slice of the training set the
server evaluates on in place of the test set, taken before the partition, so that a method is tuned on data no
reported result comes from (docs/leaderboard.md)."""
import math
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import datamodules
import in_process
from seafl_dist.data import load_dataset
from seafl_dist.data.holdout import validation_split
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import ConfigError, config_from_dict, load_config
from small_runs import QUICKSTART, SMALL
from resuming import summary


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=300), st.floats(0.01, 0.9), st.integers(0, 2**31))
def test_the_split_is_disjoint_complete_exactly_sized_stratified_and_seeded(labels, fraction, seed):
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    h = math.floor(fraction * n + 0.5)
    if n - h < 1:
        with pytest.raises(ConfigError, match="data.validation"):
            validation_split(labels, n, fraction, seed)
        return
    rest, held = validation_split(labels, n, fraction, seed)
    assert len(held) == h and len(rest) == n - h
    assert sorted([*rest.tolist(), *held.tolist()]) == list(range(n))  # disjoint and complete
    for k, g in Counter(labels.tolist()).items():  # each label's share of the held rows, to within one
        got = int((labels[held] == k).sum())
        assert math.floor(g * h / n) <= got <= math.ceil(g * h / n), (k, g, got)
    again, held_again = validation_split(labels, n, fraction, seed)
    assert np.array_equal(held_again, held) and np.array_equal(again, rest)


def test_another_seed_holds_out_other_rows():
    labels = np.repeat(np.arange(10), 50)
    a = validation_split(labels, 500, 0.2, 1)[1]
    b = validation_split(labels, 500, 0.2, 2)[1]
    assert len(a) == len(b) == 100 and not np.array_equal(a, b)


def rows_of(dataset) -> Counter:
    """Each sample (its image's bytes and its label) with how often the set holds it (the digits repeat some)."""
    return Counter((x.numpy().tobytes(), int(y)) for x, y in zip(dataset.images, dataset.labels))


def test_the_experiment_evaluates_on_a_slice_of_its_training_set_that_no_device_trains_on():
    """The digits' training part is 1,437 images (1,797 less the 360 of the test part). At f = 0.1 the server holds
    ⌊143.7 + ½⌋ = 144 of them, and the devices share out the other 1,293 whole: their shards cover the rest, and
    the rest and the validation set together are the training part, sample for sample. The test part is not read."""
    cfg = load_config(QUICKSTART, ["data.validation=0.1"])
    exp = prepare(cfg)
    full = load_dataset("digits", "data", train=True, seed=cfg.data_seed, test_fraction=cfg.data.test_fraction)
    assert len(full) == 1437 and len(exp.test) == 144 and len(exp.train) == 1293
    assert rows_of(exp.train) + rows_of(exp.test) == rows_of(full)
    covered = np.concatenate(exp.shards)
    assert sorted(covered.tolist()) == list(range(1293))  # every device row is one of the rest's
    plain = prepare(load_config(QUICKSTART, []))
    assert len(plain.test) == 360 and len(plain.train) == 1437  # without the key: the test part, as before


def test_a_run_evaluates_on_the_144_validation_samples_and_records_the_key(tmp_path):
    proc = in_process.seafl("run", QUICKSTART, *SMALL, "data.validation=0.1", "logging.progress=none",
                            "--out", tmp_path / "v")
    assert proc.returncode == 0, proc.stderr[-2000:]
    accs = [float(line.split(",")[2]) for line in (tmp_path / "v" / "metrics.csv").read_text().splitlines()[1:]]
    assert len(accs) >= 3
    assert all(abs(a * 144 - round(a * 144)) < 1e-6 for a in accs)  # counts out of 144, the validation set
    assert not all(abs(a * 360 - round(a * 360)) < 1e-6 for a in accs)  # not of the test part's 360
    assert "validation: 0.1" in (tmp_path / "v" / "config.yaml").read_text()
    assert summary(tmp_path / "v")["status"] == "completed"


def test_the_key_is_left_out_of_config_yaml_at_zero():
    from seafl_dist.settings.core import dump_config
    assert "validation" not in dump_config(config_from_dict({}, []))
    assert "validation: 0.25" in dump_config(config_from_dict({}, ["data.validation=0.25"]))


def test_the_dry_run_shows_the_devices_part_and_the_validation_set():
    proc = in_process.seafl("run", QUICKSTART, "data.validation=0.1", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1293 training and 144 validation images" in proc.stdout
    assert "(total 1293 over 30 devices)" in proc.stdout


@pytest.mark.parametrize("overrides, named", [
    (["data.validation=1.0"], "data.validation"),
    (["data.validation=-0.1"], "data.validation"),
    (["data.validation=0.1", "data.name=femnist", "data.partition=natural"], "data.validation"),
    (["data.validation=0.1", "privacy.enabled=true", "privacy.noise_multiplier=1.0"], "data.validation"),
])
def test_bad_or_unsupported_validation_is_refused_in_one_line(overrides, named):
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, overrides)
    assert str(err.value).count("\n") == 0 and f"'{named}'" in str(err.value)


def test_a_set_of_samples_is_refused_in_one_line_where_the_data_is_read(tmp_path, monkeypatch):
    name = datamodules.write(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = in_process.seafl("run", QUICKSTART, *datamodules.ARGS(name), "data.validation=0.1", "--out", tmp_path / "r")
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = [l for l in proc.stderr.splitlines() if l.startswith("seafl: error")]
    assert len(line) == 1 and "'data.validation'" in line[0] and "set of samples" in line[0]
    sys.modules.pop(name, None)
