"""The device evaluation's summary statistics (report/device_eval.py), each against numpy computed here."""
from __future__ import annotations

import math

import numpy as np
import pytest

from seafl_dist.report.device_eval import STATS, direction, summarise

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("n", [1, 7, 10, 23, 100])
def test_statistics_against_numpy(n):
    values = RNG.random(n)
    sizes = RNG.integers(1, 40, n)
    got = summarise(values, sizes, "max")
    assert got["devices"] == n and got["without_holdout"] == 0 and got["non_finite"] == 0
    assert got["weighted_mean"] == pytest.approx(np.average(values, weights=sizes))
    assert got["mean"] == pytest.approx(values.mean())
    assert got["std"] == pytest.approx(values.std(ddof=0))
    for q, name in ((0.1, "p10"), (0.5, "p50"), (0.9, "p90")):
        assert got[name] == pytest.approx(np.percentile(values, 100 * q))
    k = max(1, math.ceil(0.1 * n))
    assert got["worst10_mean"] == pytest.approx(np.sort(values)[:k].mean())  # accuracy: the lowest
    assert summarise(values, sizes, "min")["worst10_mean"] == pytest.approx(np.sort(values)[-k:].mean())  # a loss
    assert summarise(values, sizes, None)["worst10_mean"] is None
    assert (got["holdout_min"], got["holdout_median"], got["holdout_max"]) == (sizes.min(), np.median(sizes),
                                                                               sizes.max())


def test_devices_without_held_out_data_or_a_finite_value_are_left_out_and_counted():
    values = np.array([0.5, np.nan, 1.0, np.inf, 0.25])
    sizes = np.array([4, 0, 2, 3, 1])
    got = summarise(values, sizes, "max")
    assert (got["devices"], got["without_holdout"], got["non_finite"]) == (3, 1, 1)
    kept, weights = np.array([0.5, 1.0, 0.25]), np.array([4, 2, 1])
    assert got["weighted_mean"] == pytest.approx(np.average(kept, weights=weights))
    assert got["p50"] == pytest.approx(np.median(kept)) and got["holdout_min"] == 1 and got["holdout_max"] == 4
    empty = summarise([np.nan, np.nan], [0, 0], "max")
    assert empty["without_holdout"] == 2 and all(empty[s] is None for s in STATS)


def test_direction_of_a_metric():
    assert direction("accuracy") == "max" and direction("loss") == "min"
    assert direction("test_mae", "test_mae", "min") == "min" and direction("test_mae") is None
