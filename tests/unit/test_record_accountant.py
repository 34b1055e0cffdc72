"""privacy/record_accountant.py: each device's record-level ε under train.dp_sgd, against Opacus's own accountants
stepped here once per DP-SGD step (RDPAccountant / PRVAccountant: the oracle), over the jobs this test says arrived.

Steps per epoch are written out from the plan's rule (ceil(n/B) batches, a trailing batch of one sample skipped),
never taken from the code under test: n = 50, B = 10 is 5 a epoch; n = 21, B = 10 is 2 (20..21 is one sample)."""
import math
import warnings
from types import SimpleNamespace

import pytest

pytest.importorskip("opacus")
from opacus.accountants import PRVAccountant, RDPAccountant  # noqa: E402

from seafl_dist.privacy import record_accountant as ra  # noqa: E402
from seafl_dist.train.dp_sgd import job_steps  # noqa: E402

DELTA = 1e-5


def opacus_epsilon(kind: str, sigma: float, q: float, steps: int) -> float:
    acc = {"rdp": RDPAccountant, "prv": PRVAccountant}[kind]()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(acc.get_epsilon(DELTA)) if steps else 0.0


@pytest.mark.parametrize("kind", ["rdp", "prv"])
@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.2, 7), (0.7, 1.0, 3), (2.0, 10 / 21, 12)])
def test_epsilon_is_opacus_accountant_stepped_once_per_step(kind, sigma, q, steps):
    assert ra.epsilon(kind, sigma, q, steps, DELTA) == opacus_epsilon(kind, sigma, q, steps)


def test_no_step_is_zero_and_no_noise_is_infinite():
    assert ra.epsilon("rdp", 1.0, 0.5, 0, DELTA) == 0.0
    assert ra.epsilon("rdp", 0.0, 0.5, 1, DELTA) == math.inf
    assert ra.epsilon("prv", 0.0, 0.5, 1, DELTA) == math.inf
    assert 0 < ra.epsilon("rdp", 1e-3, 0.5, 1, DELTA) < math.inf
    with pytest.raises(ValueError, match="unknown accountant"):
        ra.epsilon("pld", 1.0, 0.5, 1, DELTA)


def test_the_sample_rate_is_b_over_n_capped_at_one():
    assert ra.sample_rate(50, 10) == 0.2 and ra.sample_rate(10, 10) == 1.0 and ra.sample_rate(4, 10) == 1.0


def ledger(kind="rdp", sigma=1.0, n=(50, 21, 50, 8)):
    dp = SimpleNamespace(noise_multiplier=sigma, accountant=kind)
    return ra.RecordLedger(dp, batch_size=10, n_samples=list(n), delta=DELTA, steps_of=job_steps)


def up(device, n, epochs, **kw):
    return {"device": device, "job": 100 * device + epochs, "n_samples": n, "epochs": epochs, **kw}


# device 0 (n 50): two whole 2-epoch jobs (2·5 steps each) and a SEAFL² job notified after 1 epoch (5 steps);
# device 1 (n 21): one 2-epoch job (2·2 steps), one rejected 1-epoch upload (it arrived: 2 steps); a third job of
# device 1 and every job of device 2 never arrive (started, dropped or in flight: not in an aggregate event);
# device 3 (n 8 <= B): q = 1, a FedCompass-style job of 3 steps cut from 2 epochs of 1 batch each (min(2, 3) = 2).
EVENTS = [{"event": "aggregate", "updates": [up(0, 50, 2), up(1, 21, 2)]},
          {"event": "aggregate", "updates": [up(0, 50, 1), up(1, 21, 1, rejected=True)]},
          {"event": "aggregate", "updates": [up(0, 50, 2), up(3, 8, 2, steps=3)]}]
ARRIVED = {0: (0.2, 2 * 5 + 5 + 2 * 5), 1: (10 / 21, 2 * 2 + 2), 3: (1.0, 2)}


@pytest.mark.parametrize("kind", ["rdp", "prv"])
def test_each_device_is_charged_the_steps_of_its_arrived_jobs_only(kind):
    led = ledger(kind)
    for ev in EVENTS:
        led.on_aggregate(ev)
    want = [opacus_epsilon(kind, 1.0, *ARRIVED[k]) if k in ARRIVED else 0.0 for k in range(4)]
    s = led.summary()
    assert s["by_device"] == want and want[2] == 0.0 and all(e > 0 for i, e in enumerate(want) if i != 2)
    assert s["steps_by_device"] == [25, 6, 0, 2] and s["devices_charged"] == 3
    assert s["max"] == max(want) and s["accountant"] == kind and s["delta"] == DELTA
    ordered = sorted(want)  # numpy's linear quantile over 4 values, by hand: p50 = the mean of the middle two
    assert s["quantiles"]["p50"] == pytest.approx((ordered[1] + ordered[2]) / 2, rel=1e-12)
    assert s["quantiles"]["p25"] == pytest.approx(ordered[0] + 0.75 * (ordered[1] - ordered[0]), rel=1e-12)


def test_a_partial_job_costs_less_than_a_whole_one():
    whole, part = ledger(), ledger()
    whole.on_aggregate({"updates": [up(0, 50, 2)]})
    part.on_aggregate({"updates": [up(0, 50, 1)]})
    assert part.summary()["by_device"][0] == opacus_epsilon("rdp", 1.0, 0.2, 5) < whole.summary()["by_device"][0]


def test_a_resumed_ledger_continues_to_the_uninterrupted_bytes():
    through = ledger()
    for ev in EVENTS:
        through.on_aggregate(ev)
    first = ledger()
    for ev in EVENTS:
        first.on_aggregate(ev)
    mark_after_1 = 2  # the snapshot after the first aggregation: its two updates
    state = first.state(mark_after_1)
    assert state == {"steps": {0: 10, 1: 4}}
    resumed = ledger()
    resumed.load(state)
    for ev in EVENTS[1:]:
        resumed.on_aggregate(ev)
    assert resumed.summary() == through.summary()
    with pytest.raises(ValueError, match="no DP-SGD step ledger"):
        ledger().load(None)


def test_no_arrival_at_all_is_epsilon_zero_everywhere():
    s = ledger().summary()
    assert s["by_device"] == [0.0] * 4 and s["max"] == 0.0 and s["devices_charged"] == 0


def test_one_rdp_vector_per_distinct_shard_size_not_per_device():
    ra._rdp_per_step.cache_clear()
    sizes = [40 + k % 7 for k in range(3000)]  # 3000 devices, 7 shard sizes
    led = ledger(sigma=1.3, n=sizes)
    for k in range(3000):
        led.on_aggregate({"updates": [up(k, sizes[k], 1 + k % 3)]})
    eps = led.epsilons()
    assert ra._rdp_per_step.cache_info().currsize == 7
    assert eps[5] == opacus_epsilon("rdp", 1.3, 10 / 45, 5 * (1 + 5 % 3))


def test_off_is_nothing():
    off = ra.NoLedger()
    off.on_aggregate({"updates": [up(0, 50, 2)]})
    assert not off.active and off.summary() == {} and off.state() is None and off.mark() is None


# ---- train.dp_sgd.target_epsilon: σ by bisection over every device's (q_k, T_k) -----------------------------------
# A device of a small shard (q = 1, 10 steps) against one of a large shard with ten times the steps (q = 0.05, 100):
# at σ = 1 the small one's ε is the larger (Opacus, stepped below), so calibrating to the device with the most
# steps alone would miss the target.
SMALL_SHARD, MOST_STEPS = (1.0, 10), (0.05, 100)


def test_the_device_with_the_most_steps_is_not_the_one_that_binds_here():
    assert opacus_epsilon("rdp", 1.0, *SMALL_SHARD) > opacus_epsilon("rdp", 1.0, *MOST_STEPS)


@pytest.mark.parametrize("target", [2.0, 8.0])
def test_calibrate_gives_the_smallest_sigma_whose_largest_epsilon_is_within_the_target(target):
    sigma = ra.calibrate(target, [MOST_STEPS, SMALL_SHARD, (0.05, 40), (0.5, 3)], DELTA, "rdp")
    at = [opacus_epsilon("rdp", sigma, *p) for p in (MOST_STEPS, SMALL_SHARD, (0.05, 40), (0.5, 3))]
    assert max(at) <= target  # every device within the target at σ...
    below = sigma * (1 - 1e-5)  # ...and not at a σ a little smaller (rtol 1e-6): the smallest such σ
    assert max(opacus_epsilon("rdp", below, *p) for p in (MOST_STEPS, SMALL_SHARD)) > target
    only_most = ra.calibrate(target, [MOST_STEPS], DELTA, "rdp")
    assert only_most < sigma and opacus_epsilon("rdp", only_most, *SMALL_SHARD) > target  # the device with the most
    # steps alone would leave the small shard's device above the target


def test_calibrate_under_prv_is_within_the_target_by_opacus_prv():
    sigma = ra.calibrate(4.0, [MOST_STEPS, SMALL_SHARD], DELTA, "prv", rtol=1e-3)
    assert max(opacus_epsilon("prv", sigma, *p) for p in (MOST_STEPS, SMALL_SHARD)) <= 4.0
    assert max(opacus_epsilon("prv", sigma * (1 - 3e-3), *p) for p in (MOST_STEPS, SMALL_SHARD)) > 4.0


def test_the_frontier_keeps_every_pair_no_other_dominates():
    pairs = [(0.1, 50), (0.1, 20), (0.5, 20), (0.5, 10), (1.0, 5), (0.05, 50), (0.05, 60), (0.2, 0)]
    assert ra.frontier(pairs) == [(0.05, 60), (0.1, 50), (0.5, 20), (1.0, 5)]


def test_calibrate_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="no device takes a DP-SGD step"):
        ra.calibrate(1.0, [(0.5, 0)], DELTA)
    with pytest.raises(ValueError, match="must be > 0"):
        ra.calibrate(0.0, [(0.5, 3)], DELTA)


def test_the_schedule_pairs_are_the_aggregated_updates_steps_only():
    evs = [{"event": "start", "device": 2}, *EVENTS, {"event": "finish", "device": 2}]
    pairs = ra.schedule_pairs(evs, [50, 21, 50, 8], 10, job_steps)
    assert pairs == [(0.2, 25), (10 / 21, 6), (1.0, 2)]


def test_the_runs_ledger_reads_its_section_its_batch_size_and_privacys_delta():
    def exp(enabled):
        dp = SimpleNamespace(enabled=enabled, noise_multiplier=0.9, accountant="rdp")
        cfg = SimpleNamespace(train=SimpleNamespace(dp_sgd=dp, batch_size=10), privacy=SimpleNamespace(delta=1e-3))
        return SimpleNamespace(cfg=cfg, dp_sgd=dp, n_samples=[50, 21])
    assert isinstance(ra.ledger_of(exp(False), job_steps), ra.NoLedger) and not ra.ledger_of(exp(False), job_steps).active
    led = ra.ledger_of(exp(True), job_steps)
    led.on_aggregate({"updates": [up(1, 21, 1)]})
    acc = RDPAccountant()
    for _ in range(2):  # n 21, B 10: two steps an epoch
        acc.step(noise_multiplier=0.9, sample_rate=10 / 21)
    assert led.summary()["by_device"] == [0.0, acc.get_epsilon(1e-3)] and led.summary()["delta"] == 1e-3


def test_under_prv_a_dominated_pair_above_the_target_is_bisected_over_every_pair(monkeypatch):
    """PRV's grid need not be monotone in (q, T): a stand-in accountant whose ε is 1/σ for every pair but a
    dominated one, (0.1, 5), at 3/σ. Under prv that pair binds (σ = 3 for a target of 1); under rdp, whose bound
    grows with q and T, the frontier alone is composed (σ = 1)."""
    fake = lambda accountant, z, q, t, delta: (3.0 if (q, t) == (0.1, 5) else 1.0) / z  # noqa: E731
    monkeypatch.setattr(ra, "epsilon", fake)
    pairs = [(0.5, 10), (0.1, 5)]
    assert ra.frontier(pairs) == [(0.5, 10)]
    assert ra.calibrate(1.0, pairs, DELTA, "prv") == pytest.approx(3.0, rel=1e-5)
    assert ra.calibrate(1.0, pairs, DELTA, "rdp") == pytest.approx(1.0, rel=1e-5)
    assert ra.calibrate(1.0, pairs, DELTA, "prv") >= 3.0 and ra.calibrate(1.0, pairs, DELTA, "rdp") >= 1.0  # from above


def test_a_delta_not_below_one_over_the_largest_shard_is_warned_of_in_one_line():
    from seafl_dist.privacy.record_accountant import delta_warning
    line = delta_warning([10, 600, 20], 1 / 600)  # at the edge: δ = 1/n_k of the largest shard
    assert line.startswith("seafl: warning: privacy.delta=") and "\n" not in line and "n_k = 600" in line
    assert delta_warning([10, 600, 20], 0.5) is not None
    assert delta_warning([10, 600, 20], 1 / 600 * (1 - 1e-9)) is None  # just below: no line
    assert delta_warning([10, 20], 1 / 30) is None  # the largest shard binds, not the smallest
    assert delta_warning([], 0.5) is None
