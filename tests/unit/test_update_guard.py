"""The update guard (algorithm.update_norm_factor, algo/guard.py): norms over the trainable parameters in
float64, the buffer's median or the last 20 accepted norms as the reference, rejections made before any
rule (a user's own included) and reported as the value check's are."""
import math

import pytest
import torch

from seafl_dist.algo import AggregationResult, BufferedUpdate, FlatParts, aggregate
from seafl_dist.algo.guard import HISTORY, NormHistory, update_norm
from seafl_dist.settings import AlgorithmConfig, ConfigError, config_from_dict

T = torch.tensor
W0 = torch.zeros(3)


def up(job, delta, base=0, n=10):
    return BufferedUpdate(device=job, job=job, flat=W0 + T(delta), n_samples=n, base_version=base, epochs=1)


def buffer(*norms):
    """Updates along the first axis with these norms, all from version 0 (w_0 = 0)."""
    return [up(i, [n, 0.0, 0.0]) for i, n in enumerate(norms)]


def fedbuff(factor):
    return AlgorithmConfig(name="fedbuff", update_norm_factor=factor)


def test_the_norm_runs_over_trainable_parameters_in_float64():
    parts = FlatParts(params=T([True, True, False]), stats=T([False, False, True]), counters=T([False] * 3))
    res = aggregate(fedbuff(None), 0, W0, [up(0, [3.0, 4.0, 100.0])], {0: W0}.__getitem__, parts, NormHistory())
    assert res.norms == [5.0]  # the batch-norm statistic (100) is not a step of the model's weights
    big = torch.full((3,), 1e30, dtype=torch.float32)  # its square overflows float32, not float64
    assert update_norm(big, torch.zeros(3), None) == pytest.approx(math.sqrt(3) * 1e30, rel=1e-6)


def test_an_update_far_above_the_buffers_median_is_rejected_before_the_rule():
    history = NormHistory()
    ups = buffer(1.0, 1.2, 0.9, 50.0)
    res = aggregate(fedbuff(10), 0, W0, ups, {0: W0}.__getitem__, None, history)
    assert [i["rejected"] for i in res.info] == [False, False, False, True]
    assert res.info[3] == {"weight": 0.0, "rejected": True, "staleness": 0,
                           "reason": "update norm 50 > 10 × the buffer's median norm 1.1"}
    # FedBuff's mean over the three it kept: the rejected update takes no part in |B|
    assert torch.allclose(res.new_global, T([(1.0 + 1.2 + 0.9) / 3, 0.0, 0.0]))
    assert history.to_list() == pytest.approx([1.0, 1.2, 0.9])  # accepted norms only
    kept = aggregate(fedbuff(100), 0, W0, ups, {0: W0}.__getitem__, None, NormHistory())
    assert not any(i["rejected"] for i in kept.info)  # 50 < 100 × 1.1


def test_a_buffer_of_three_or_more_is_its_own_reference_whatever_the_history_holds():
    history = NormHistory([100.0] * 5)  # large accepted norms: with them in the median, 50 would pass
    res = aggregate(fedbuff(10), 0, W0, buffer(1.0, 1.2, 0.9, 50.0), {0: W0}.__getitem__, None, history)
    assert [i["rejected"] for i in res.info] == [False, False, False, True]
    assert res.info[3]["reason"] == "update norm 50 > 10 × the buffer's median norm 1.1"
    assert history.to_list() == pytest.approx([100.0] * 5 + [1.0, 1.2, 0.9])


def test_three_peers_are_a_reference_and_a_norm_at_exactly_the_factor_is_kept():
    res = aggregate(fedbuff(10), 0, W0, buffer(1.0, 1.0, 50.0), {0: W0}.__getitem__, None, NormHistory())
    assert [i["rejected"] for i in res.info] == [False, False, True]  # three norms: their median (1) judges
    res = aggregate(fedbuff(10), 0, W0, buffer(1.0, 1.0, 1.0, 10.0), {0: W0}.__getitem__, None, NormHistory())
    assert not any(i["rejected"] for i in res.info)  # 10 = 10 × 1 is not above it


def test_with_the_guard_off_norms_are_measured_and_nothing_is_rejected():
    history = NormHistory()
    res = aggregate(fedbuff(None), 0, W0, buffer(1.0, 1.0, 1.0, 1e6), {0: W0}.__getitem__, None, history)
    assert res.norms == [1.0, 1.0, 1.0, 1e6] and not any(i["rejected"] for i in res.info)
    assert len(history.to_list()) == 4
    plain = aggregate(fedbuff(None), 0, W0, buffer(1.0), {0: W0}.__getitem__)
    assert plain.norms is None  # neither a history nor a guard: the rule alone, as before


def test_a_buffer_of_one_is_compared_with_the_last_accepted_norms():
    cfg, history = AlgorithmConfig(name="fedasync", update_norm_factor=5), NormHistory()
    verdicts = []
    for job, norm in enumerate([1.0, 100.0, 2.0, 1.5, 8.0, 40.0, 1.0]):
        res = aggregate(cfg, 0, W0, [up(job, [norm, 0.0, 0.0])], {0: W0}.__getitem__, None, history)
        verdicts.append(res.info[0]["rejected"])
    # fewer than 3 accepted norms: nothing to compare with, so 100 passes; 8 <= 5 x median(1, 100, 2, 1.5) = 8.75;
    # 40 > 5 x median(1, 100, 2, 1.5, 8) = 10
    assert verdicts == [False, False, False, False, False, True, False]
    reason = aggregate(cfg, 0, W0, [up(9, [1e3, 0.0, 0.0])], {0: W0}.__getitem__, None, history).info[0]["reason"]
    assert reason.startswith("update norm 1000 > 5 × the last 6 accepted median norm")
    for job in range(30):  # the history keeps the last 20
        aggregate(cfg, 0, W0, [up(job, [3.0, 0.0, 0.0])], {0: W0}.__getitem__, None, history)
    assert history.to_list() == [3.0] * HISTORY


def test_non_finite_updates_are_the_value_checks_and_never_peers():
    ups = buffer(1.0) + [up(1, [float("nan"), 0.0, 0.0]), up(2, [30.0, 0.0, 0.0])]
    history = NormHistory([1.0, 1.0, 1.0])
    res = aggregate(fedbuff(10), 0, W0, ups, {0: W0}.__getitem__, None, history)
    assert res.norms[1] is None and res.info[1]["reason"] == "non-finite"
    # two finite peers (1 and 30) are too few: the last accepted norms (median 1) judge the 30
    assert res.info[2]["rejected"] and "the last 3 accepted median norm 1" in res.info[2]["reason"]


def test_every_update_rejected_keeps_the_global_model():
    history = NormHistory([1.0, 1.0, 1.0])
    res = aggregate(AlgorithmConfig(name="seafl", update_norm_factor=2), 0, W0, buffer(9.0, 8.0),
                    {0: W0}.__getitem__, None, history)
    assert torch.equal(res.new_global, W0) and res.new_global is not W0
    assert [i["rejected"] for i in res.info] == [True, True]


def test_seafls_own_keys_stay_in_a_guard_rejected_entry():
    res = aggregate(AlgorithmConfig(name="seafl", update_norm_factor=10), 2, W0, buffer(1.0, 1.1, 0.9, 99.0),
                    {0: W0}.__getitem__, None, NormHistory())
    assert set(res.info[3]) == set(res.info[0]) and res.info[3]["gamma"] is None and res.info[3]["cos"] is None
    assert res.info[3]["staleness"] == 2


def test_a_users_rule_sees_only_the_updates_the_guard_kept(monkeypatch):
    seen = []

    def mean_rule(cfg, version, global_flat, updates, base_model):
        seen.append([u.job for u in updates])
        new = torch.stack([u.flat for u in updates]).mean(0)
        return AggregationResult(new, [{"weight": 1 / len(updates)} for _ in updates])

    import seafl_dist.settings.plugins as plugins
    monkeypatch.setitem(plugins._RESOLVED, "myrules:mean", mean_rule)
    cfg = config_from_dict({}, ["algorithm.name=myrules:mean", "algorithm.update_norm_factor=10"]).algorithm
    res = aggregate(cfg, 0, W0, buffer(1.0, 2.0, 3.0, 500.0), {0: W0}.__getitem__, None, NormHistory())
    assert seen == [[0, 1, 2]] and res.info[3]["rejected"] and res.info[0]["weight"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("value", ["1", "0.5", "-.inf", ".nan"])
def test_the_factor_must_exceed_one(value):
    with pytest.raises(ConfigError, match="'algorithm.update_norm_factor'.*a number > 1, or null or .inf"):
        config_from_dict({}, [f"algorithm.update_norm_factor={value}"])
    assert config_from_dict({}, ["algorithm.update_norm_factor=.inf"]).algorithm.update_norm_factor is None
