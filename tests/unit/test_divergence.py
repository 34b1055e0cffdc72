"""The divergence rule (report/divergence.py) on metric rows: each condition at its boundary, the accuracy
rule's wait for a sustained collapse, the run's end, and a resumed run's rebuilt state."""
import math

import numpy as np
import pytest
import torch

from seafl_dist.report.divergence import KEPT, LEARNED, LOSS_FACTOR, SUSTAINED, Divergence, majority_share

C = 0.1  # ten balanced classes


def rows(*points):
    """(accuracy, loss) per evaluation, version 0 first, ten virtual seconds apart."""
    return [{"version": v, "time": 10.0 * v, "accuracy": a, "loss": l} for v, (a, l) in enumerate(points)]


def first(points, chance=C):
    """(where the run diverged, why, at which evaluation it was said) or None."""
    d = Divergence(chance)
    for r in rows(*points):
        if (why := d.observe(r)) is not None:
            return d.at, why, r["version"]
    if (why := d.finish()) is not None:
        return d.at, why, "end"
    return None


def test_the_constants_are_the_documented_ones():
    assert (LOSS_FACTOR, LEARNED, KEPT, SUSTAINED) == (10.0, 0.5, 0.1, 3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_diverges_at_once(bad):
    at, why, said = first([(0.1, 2.0), (0.5, 1.0), (0.1, bad), (0.9, 0.3)])
    assert at == {"version": 2, "time": 20.0} and said == 2 and why == f"the loss is {bad}"


def test_a_loss_ten_times_the_first_diverges_at_once_and_not_at_exactly_ten():
    assert first([(0.1, 2.0), (0.5, 20.0), (0.5, 1.0)]) is None  # 20 = 10 x 2 is not above it
    at, why, said = first([(0.1, 2.0), (0.5, 20.001), (0.9, 0.1)])
    assert at["version"] == 1 and said == 1 and "> 10 × the version-0 loss 2" in why


def test_a_collapse_is_named_where_it_began_once_it_lasted_three_evaluations():
    # best 0.9 >= 0.1 + 0.5 x 0.9 = 0.55; the floor is 0.1 + 0.1 x (0.9 - 0.1) = 0.18
    at, why, said = first([(0.1, 2.3), (0.9, 0.3), (0.18, 2.2), (0.15, 2.2), (0.12, 2.3), (0.9, 0.3)])
    assert at == {"version": 2, "time": 20.0} and said == 4
    assert "fell to 0.1800" in why and "best 0.9000" in why and "for 3 evaluations" in why


def test_a_dip_that_recovers_is_not_a_divergence():
    """The README's FedBuff example fell from 0.847 to 0.111 at version 8 and was at 0.864 by version 10."""
    assert first([(0.1, 2.3), (0.85, 0.7), (0.11, 2.36), (0.54, 1.4), (0.86, 0.45)]) is None
    assert first([(0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 2.3), (0.5, 1.0), (0.1, 2.3), (0.1, 2.3)]) is not None
    assert first([(0.1, 2.3), (0.9, 0.3), (0.181, 2.2), (0.1, 2.3), (0.1, 2.3), (0.9, 0.3)]) is None  # 0.181 > floor


def test_a_blow_up_inside_an_open_collapse_is_dated_where_the_collapse_began():
    # the accuracy collapsed at version 2 (not yet sustained); at version 3 the loss blows up: the run diverged
    # at version 2, said at once, for the loss
    at, why, said = first([(0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 23.5), (0.9, 0.3)])
    assert at == {"version": 2, "time": 20.0} and said == 3
    assert why == "the loss 23.5 > 10 × the version-0 loss 2.3"
    d = Divergence(C)
    d.replay(rows((0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 23.5)))
    assert d.at == {"version": 2, "time": 20.0} and d.pending is None and d.finish() is None


def test_the_accuracy_floor_and_the_loss_factor_are_inclusive_and_exclusive_as_documented():
    # chance 0, best 1.0: the floor is 0 + 0.1 × 1.0 = 0.1 exactly, and an accuracy at it has collapsed
    at, why, said = first([(0.0, 2.0), (1.0, 0.1), (0.1, 2.0), (0.1, 2.0), (0.1, 2.0)], chance=0.0)
    assert at["version"] == 2 and said == 4
    assert why == ("the accuracy fell to 0.1000, keeping at most 10% of the best 1.0000's margin over chance (0.0000, "
                   "the largest class's share of the test set), and stayed there for 3 evaluations")
    # a version-0 loss of 0 (or none) is no reference: no later loss is ten times it
    assert first([(0.1, 0.0), (0.5, 1.0), (0.5, 5.0)]) is None
    assert first([(0.1, None), (0.5, 1.0), (0.5, 50.0)]) is None


def test_a_collapse_of_two_evaluations_at_the_end_says_how_long():
    at, why, said = first([(0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 2.3)])
    assert at["version"] == 2 and said == "end" and why.endswith("), and stayed there for 2 evaluations")


def test_the_built_in_loss_as_target_metric_keeps_the_accuracy_rule():
    """run.target_metric=loss, run.target_mode=min: the built-in evaluation still gives the accuracy, and a
    collapse of it is a divergence as for the default metric."""
    d = Divergence(C, "loss", "min")
    said = [d.observe(r) for r in rows((0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 2.3), (0.1, 2.3))]
    assert said[:4] == [None] * 4 and said[4].startswith("the accuracy fell to 0.1000") and d.at["version"] == 2


def test_a_collapse_that_lasts_until_the_end_is_named_there():
    at, why, said = first([(0.1, 2.3), (0.9, 0.3), (0.1, 2.3)])
    assert at["version"] == 2 and said == "end"
    assert why == ("the accuracy fell to 0.1000, keeping at most 10% of the best 0.9000's margin over chance (0.1000, "
                   "the largest class's share of the test set), and the run ended there")


def test_a_run_that_never_learned_half_way_is_not_said_to_collapse():
    # best 0.54 < 0.55: a run that never learned much cannot lose it
    assert first([(0.1, 2.3), (0.54, 1.5), (0.1, 2.3), (0.1, 2.3), (0.1, 2.3)]) is None
    assert first([(0.1, 2.3), (0.55, 1.5), (0.1, 2.3), (0.1, 2.3), (0.1, 2.3)]) is not None


def test_without_class_labels_only_the_loss_rule_applies():
    assert first([(0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 2.3), (0.1, 2.3)], chance=None) is None
    assert first([(0.1, 2.3), (0.9, 0.3), (0.1, math.inf)], chance=None)[0]["version"] == 2


def test_it_is_said_once():
    d = Divergence(C)
    said = [d.observe(r) for r in rows((0.1, 2.0), (0.5, math.nan), (0.5, math.nan), (0.1, 1e9))]
    assert [s is not None for s in said] == [False, True, False, False] and d.finish() is None


def test_a_resumed_run_rebuilds_the_state_from_its_rows():
    history = rows((0.1, 2.3), (0.9, 0.3), (0.1, 2.3), (0.1, 2.3))
    whole, resumed = Divergence(C), Divergence(C)
    for r in history:
        whole.observe(r)
    resumed.replay(history[:3])  # the checkpoint's rows: a collapse open since version 2
    assert resumed.pending["version"] == 2 and resumed.best == 0.9 and resumed.first_loss == 2.3
    assert resumed.observe(history[3]) is None and resumed.pending == whole.pending
    nxt = {"version": 4, "time": 40.0, "accuracy": 0.1, "loss": 2.3}
    assert resumed.observe(dict(nxt)) is not None and whole.observe(dict(nxt)) is not None
    assert resumed.at == whole.at == {"version": 2, "time": 20.0}


class OnDevice:
    """A tensor on a GPU, as numpy sees it: readable only through ``.cpu()``."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __len__(self):
        return len(self.tensor)

    def cpu(self):
        return self.tensor

    def __array__(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


def test_the_chance_level_is_the_largest_class_share():
    assert majority_share(torch.tensor([0, 1, 1, 2])) == 0.5
    assert majority_share(OnDevice(torch.tensor([4, 4, 1, 4]))) == 0.75
    assert majority_share(np.array([[3], [3], [1]])) == pytest.approx(2 / 3)  # a column of labels
    assert majority_share(np.array([3, 3, 3])) == 1.0
    assert majority_share(None) is None and majority_share(torch.tensor([], dtype=torch.int64)) is None


def own(values, mode):
    """A module's own metric (test_loss, or a score) per evaluation, beside null accuracy and loss."""
    d = Divergence(C, "score" if mode == "max" else "test_loss", mode)
    for v, value in enumerate(values):
        row = {"version": v, "time": 10.0 * v, "accuracy": None, "loss": None,
               ("score" if mode == "max" else "test_loss"): value}
        if (why := d.observe(row)) is not None:
            return d.at, why
    return d.finish()


def test_a_modules_own_loss_diverges_above_ten_times_its_first_value_or_when_not_finite():
    assert own([1.0, 0.5, 10.0, 0.4], "min") is None  # exactly ten times: not yet
    assert own([None, 1.0, 50.0], "min") is None  # no version-0 value: nothing to be ten times
    at, why = own([1.0, 0.5, 10.01, 0.4], "min")
    assert at == {"version": 2, "time": 20.0} and why.startswith("the test_loss 10.01 > 10 × the version-0 test_loss 1")
    at, why = own([1.0, 0.5, float("nan")], "min")
    assert at["version"] == 2 and why == "the test_loss is nan"


def test_a_modules_own_score_diverges_only_when_not_finite():
    assert own([0.1, 0.9, 0.0, 0.0, 0.0, 0.0], "max") is None  # no chance level: a fall is not a divergence
    assert own([0.01, 0.5, 0.9, 0.95], "max") is None  # a score that rises ninety-fold is no loss blowing up
    at, why = own([0.1, 0.9, float("inf")], "max")
    assert at["version"] == 2 and why == "the score is inf"
