"""The bundled digits read without scikit-learn (data/digits.py), checked against scikit-learn itself: the same
pixels and labels as load_digits(), and the same rows as train_test_split(stratify=..., random_state=...) for
every seed and fraction tried and for random label vectors (ties between classes' remainders included)."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from seafl_dist.data.digits import read_digits, stratified_split

FRACTIONS = [0.001, 0.01, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.75, 0.9, 0.99]


def sklearn_rows(labels, seed, fraction):
    tr, te = train_test_split(np.arange(len(labels)), test_size=fraction, random_state=seed, stratify=labels)
    return np.sort(tr), np.sort(te)


def test_the_file_gives_load_digits_pixels_and_labels():
    images, labels = read_digits()
    ref = load_digits()
    assert images.dtype == ref.images.dtype and np.array_equal(images, ref.images)
    assert labels.dtype == np.int64 and np.array_equal(labels, ref.target)


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_the_split_is_train_test_split_for_every_seed(fraction):
    _, labels = read_digits()
    for seed in range(20):
        try:
            expected = sklearn_rows(labels, seed, fraction)
        except ValueError:  # fewer rows than classes on one side (fraction 0.001: 2 test rows)
            with pytest.raises(ValueError):
                stratified_split(labels, seed, fraction)
            continue
        got = stratified_split(labels, seed, fraction)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]), (seed, fraction)


@given(counts=st.lists(st.integers(2, 9), min_size=2, max_size=6), seed=st.integers(0, 2**31 - 1),
       fraction=st.sampled_from(FRACTIONS), shuffle=st.integers(0, 1000))
def test_the_split_is_train_test_split_for_any_labels(counts, seed, fraction, shuffle):
    labels = np.random.RandomState(shuffle).permutation(np.repeat(np.arange(len(counts)) * 3 + 1, counts))
    try:
        expected = sklearn_rows(labels, seed, fraction)
    except ValueError:
        with pytest.raises(ValueError):
            stratified_split(labels, seed, fraction)
        return
    got = stratified_split(labels, seed, fraction)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_a_class_of_one_and_fractions_outside_zero_one_are_refused():
    with pytest.raises(ValueError, match="at least 2 per class"):
        stratified_split(np.array([0, 0, 1, 1, 2]), 0, 0.4)
    for fraction in (0, 1, -0.1, 1.5):
        with pytest.raises(ValueError, match="must be in"):
            stratified_split(np.arange(10) % 2, 0, fraction)


def test_loading_digits_does_not_import_scikit_learn():
    code = ("import sys; from seafl_dist.data import load_dataset; load_dataset('digits', train=True, seed=0); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
