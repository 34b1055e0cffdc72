"""FedStaleWeight as its authors' bench computes it (algorithm.name: fedstaleweight; 18jeffreyma/afl-bench,
afl_bench/experiments/expected_staleness.py), against its algorithm written again here: numbers worked by hand, and
an oracle in plain Python floats run over sequences of aggregations with its own count and sum of each device's
staleness (Hypothesis: stale bases, devices seen twice or never, rejected and non-finite updates, K = 1 and K > 1).
The oracle calls nothing in seafl_dist/algo.

For the accepted updates of a buffer at version t (S_k = t − t_k, Δ_k = w_k − w_{t_k}, i(k) the device of k):
    every accepted update counted first:  n_i += 1,  Σ_i += S_k;   s̄_i = Σ_i / n_i
    p_k = (s̄_{i(k)} + c) / Σ_{j ∈ B} (s̄_{i(j)} + c)  (all 0 when that sum is 0);   w_{t+1} = w_t + Σ_k p_k Δ_k
with c = algorithm.fedstaleweight.offset (0: the bench's weight; 1, the default: the average of S + 1).
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from seafl_dist.algo import BufferedUpdate, FlatParts, ServerOptimizer, aggregate, memory_of
from seafl_dist.settings import AlgorithmConfig, ConfigError
from seafl_dist.settings.core import dump_config, load_config
from seafl_dist.settings.fedstaleweight import FedStaleWeightConfig
from rule_states import broken
from small_runs import QUICKSTART

T = torch.tensor


def up(device, base, flat, n=1):
    return BufferedUpdate(device=device, job=device, flat=T(flat, dtype=torch.float32), n_samples=n,
                          base_version=base, epochs=1)


class Run:
    """Aggregations carried as the server carries them: one RuleMemory, the global models by version."""

    def __init__(self, w0, offset=0.0, **kw):
        self.cfg = AlgorithmConfig(name="fedstaleweight", fedstaleweight=FedStaleWeightConfig(offset=offset), **kw)
        self.memory = memory_of(self.cfg)
        self.versions, self.t = {0: T(w0, dtype=torch.float32)}, 0

    def step(self, updates):
        res = aggregate(self.cfg, self.t, self.versions[self.t], updates, self.versions.__getitem__,
                        memory=self.memory)
        self.t += 1
        self.versions[self.t] = res.new_global
        return res

    def at(self, base, delta):
        """w_base + delta, as a list (an update's model)."""
        return [w + d for w, d in zip(self.versions[base].tolist(), delta)]

    def counts(self):
        return {i: e.tolist() for i, e in self.memory.state["devices"].items()}


# ---- by hand (c = 0, the bench's weight, unless said) ------------------------------------------------------------

def hand_sequence():
    run = Run([0.0, 0.0])
    # t = 0: A (device 0, S = 0): n_0 = 1, Σ_0 = 0, s̄_0 = 0; Σ s̄ = 0, so p_A = 0 and w_1 = w_0
    first = run.step([up(0, 0, [1.0, 0.0])])
    # t = 1: B (device 1, from w_0, S = 1): s̄_1 = 1; C (device 0, S = 0): s̄_0 = 0/2 = 0. p_B = 1, p_C = 0
    second = run.step([up(1, 0, run.at(0, [0.0, 2.0])), up(0, 1, run.at(1, [3.0, 0.0]))])
    # t = 2: D (device 0, from w_0, S = 2): s̄_0 = 2/3; E (device 1, S = 0): s̄_1 = 1/2; F (device 2, from w_1,
    # S = 1): s̄_2 = 1. Σ = 13/6: p = 4/13, 3/13, 6/13
    third = run.step([up(0, 0, run.at(0, [2.0, 0.0])), up(1, 2, run.at(2, [0.0, -1.0])),
                      up(2, 1, run.at(1, [1.0, 1.0]))])
    # t = 3: G and H both device 2 (S = 2 and 0): n_2 = 3, Σ_2 = 3, s̄_2 = 1 for both, p = 1/2 each; I (device 1)
    # is non-finite: rejected, device 1 stays (2, 1)
    fourth = run.step([up(2, 1, run.at(1, [1.0, 0.0])), up(1, 3, [math.nan, 0.0]), up(2, 3, run.at(3, [0.0, 1.0]))])
    return run, (first, second, third, fourth)


def test_four_aggregations_worked_by_hand():
    run, (first, second, third, fourth) = hand_sequence()
    assert [d["weight"] for d in first.info] == [0.0] and first.info[0]["avg_staleness"] == 0.0
    assert run.versions[1].tolist() == [0.0, 0.0]
    assert [d["weight"] for d in second.info] == [1.0, 0.0] and run.versions[2].tolist() == [0.0, 2.0]
    assert [d["weight"] for d in third.info] == pytest.approx([4 / 13, 3 / 13, 6 / 13], abs=1e-12)
    assert [d["avg_staleness"] for d in third.info] == pytest.approx([2 / 3, 1 / 2, 1.0], abs=1e-12)
    assert run.versions[3].tolist() == pytest.approx([14 / 13, 29 / 13], abs=1e-6)
    assert [d["weight"] for d in fourth.info] == pytest.approx([0.5, 0.0, 0.5], abs=1e-12)
    assert fourth.info[1]["rejected"] and fourth.info[1]["avg_staleness"] is None
    assert run.versions[4].tolist() == pytest.approx([14 / 13 + 0.5, 29 / 13 + 0.5], abs=1e-6)
    assert run.counts() == {0: [3, 2], 1: [2, 1], 2: [3, 3]}


def test_the_default_offset_counts_staleness_from_one():
    """c = 1: the first aggregation's fresh update takes the whole step (raw 0 + 1); then B (device 1, S = 1,
    raw 2) and C (device 0, averages (0 + 0)/2, raw 1): p = 2/3, 1/3."""
    run = Run([0.0, 0.0], offset=1.0)
    first = run.step([up(0, 0, [1.0, 0.0])])
    assert [d["weight"] for d in first.info] == [1.0] and run.versions[1].tolist() == [1.0, 0.0]
    second = run.step([up(1, 0, run.at(0, [0.0, 3.0])), up(0, 1, run.at(1, [3.0, 0.0]))])
    assert [d["weight"] for d in second.info] == pytest.approx([2 / 3, 1 / 3], abs=1e-12)
    assert run.versions[2].tolist() == pytest.approx([2.0, 2.0], abs=1e-6)
    assert AlgorithmConfig(name="fedstaleweight").fedstaleweight.offset == 1.0


def test_the_update_being_aggregated_counts_toward_its_devices_average_before_its_weight():
    """Device 0 fresh twice, then stale by 3: its average is (0 + 0 + 3)/3 = 1 with this update counted (0 if it
    were counted after its weight); device 1, stale by 1 once before and fresh now, has (1 + 0)/2."""
    run = Run([0.0])
    run.step([up(0, 0, [1.0])])
    run.step([up(1, 0, [2.0]), up(0, 1, [3.0])])
    run.step([up(2, 2, [1.0])])
    res = run.step([up(0, 0, run.at(0, [6.0])), up(1, 3, run.at(3, [3.0]))])
    assert [d["avg_staleness"] for d in res.info] == [1.0, 0.5]
    assert [d["weight"] for d in res.info] == pytest.approx([2 / 3, 1 / 3], abs=1e-12)


def test_an_update_the_guard_rejects_does_not_count_toward_its_devices_average():
    """Four updates from w_0, one (device 3) far above the others' median: the guard removes it before the rule,
    so device 3 stays unseen."""
    run = Run([0.0, 0.0], update_norm_factor=3.0, buffer_size=4)
    run.step([up(0, 0, [0.5, 0.0])])
    res = run.step([up(i, 0, d) for i, d in enumerate([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [90.0, 0.0]])])
    assert [d["rejected"] for d in res.info] == [False, False, False, True]
    assert res.info[3]["avg_staleness"] is None
    assert run.counts() == {0: [2, 1], 1: [1, 1], 2: [1, 1]}


def test_a_buffer_of_rejected_updates_takes_no_step_and_keeps_every_entry():
    run = Run([0.0, 0.0])
    run.step([up(0, 0, [1.0, 1.0])])
    before = run.memory.state["devices"]
    res = run.step([up(0, 0, [math.inf, 0.0]), up(1, 1, [0.0])])
    assert [d["rejected"] for d in res.info] == [True, True]
    assert torch.equal(run.versions[2], run.versions[1])
    after = run.memory.state["devices"]
    assert set(after) == {0} and after[0] is before[0] and after[0].tolist() == [1, 0]


# ---- the oracle -------------------------------------------------------------------------------------------------

def oracle(t, w_t, updates, bases, seen, c):
    """FedStaleWeight in Python floats. ``updates``: (device, flat or None if rejected, base); ``bases``: the
    global models by version (lists); ``seen``: the oracle's own {device: [count, sum]} (updated here); ``c``: the
    offset.
    Returns (w_{t+1}, weights, averages)."""
    kept = [(i, dev, flat, base) for i, (dev, flat, base) in enumerate(updates) if flat is not None]
    for _, dev, _, base in kept:
        entry = seen.setdefault(dev, [0, 0])
        entry[0] += 1
        entry[1] += t - base
    weights, averages = [0.0] * len(updates), [None] * len(updates)
    for i, dev, _, _ in kept:
        averages[i] = seen[dev][1] / seen[dev][0]
    total = sum(averages[i] + c for i, _, _, _ in kept)
    out = list(w_t)
    if total > 0:
        for i, _, flat, base in kept:
            weights[i] = (averages[i] + c) / total
            out = [o + weights[i] * (a - b) for o, a, b in zip(out, flat, bases[base])]
    return out, weights, averages


D = 4
VALUE = st.floats(-4, 4, allow_nan=False, width=32)
UPDATE = st.tuples(st.integers(0, 5), st.integers(0, 4), st.sampled_from(["ok", "ok", "ok", "nan", "inf", "size"]),
                   st.lists(VALUE, min_size=D, max_size=D))
BUFFERS = st.lists(st.lists(UPDATE, min_size=1, max_size=4), min_size=1, max_size=7)


@given(BUFFERS, st.lists(VALUE, min_size=D, max_size=D), st.sampled_from([0.0, 1.0, 2.5]))
def test_fedstaleweight_matches_the_oracle_over_sequences_and_never_writes_its_old_state(buffers, w0, c):
    run, seen = Run(w0, offset=c), {}
    for buffer in buffers:
        t = run.t
        updates, plain = [], []
        for device, back, kind, delta in buffer:
            base = max(0, t - back)  # a stale base: up to 4 versions back
            flat = run.at(base, delta)
            flat = broken(flat, kind, device % D)
            updates.append(up(device, base, flat))
            plain.append((device, T(flat, dtype=torch.float32).tolist() if kind == "ok" else None, base))
        old = run.memory.state
        snapshot = {i: e.clone() for i, e in old.get("devices", {}).items()}
        res = run.step(updates)
        bases = {v: w.tolist() for v, w in run.versions.items()}
        want, weights, averages = oracle(t, bases[t], plain, bases, seen, c)
        assert res.new_global.tolist() == pytest.approx(want, rel=1e-4, abs=1e-4)
        assert [d["weight"] for d in res.info] == pytest.approx(weights, rel=1e-9, abs=1e-12)
        assert [d["avg_staleness"] is None for d in res.info] == [a is None for a in averages]
        assert [a for a in (d["avg_staleness"] for d in res.info) if a is not None] == \
            pytest.approx([a for a in averages if a is not None], rel=1e-12)
        assert [d["rejected"] for d in res.info] == [p[1] is None for p in plain]
        # the state before this aggregation: its mapping and every tensor as they were (bitwise), nothing written
        assert sorted(old.get("devices", {})) == sorted(snapshot)
        assert all(torch.equal(old["devices"][i], e) for i, e in snapshot.items())
        # the new state: the oracle's counts, only the devices seen; the entries of devices not counted now shared
        new = run.memory.state["devices"]
        assert run.counts() == seen
        counted_now = {dev for dev, flat, _ in plain if flat is not None}
        assert all(new[i] is old["devices"][i] for i in snapshot if i not in counted_now)


# ---- with everything else ---------------------------------------------------------------------------------------

def test_the_counters_come_from_the_accepted_updates_only():
    """w_0 = (0, 0, 5) with entry 2 an integer counter; the accepted update (weight 1, c = 1) has 6 there, the
    rejected one (NaN elsewhere) 99: the counter is max(5, 6) = 6, never the rejected one's (the audit's slip A5)."""
    cfg = AlgorithmConfig(name="fedstaleweight")
    counter = torch.tensor([False, False, True])
    parts = FlatParts(params=~counter, stats=torch.zeros(3, dtype=torch.bool), counters=counter)
    w = T([0.0, 0.0, 5.0])
    result = aggregate(cfg, 0, w, [up(0, 0, [1.0, 1.0, 6.0]), up(1, 0, [math.nan, 1.0, 99.0])], lambda v: w, parts,
                       memory=memory_of(cfg))
    assert [d["rejected"] for d in result.info] == [False, True]
    assert result.new_global.tolist() == [1.0, 1.0, 6.0]


def test_fedstaleweight_under_privacy_is_refused_in_one_line_naming_algorithm_name():
    with pytest.raises(ConfigError) as err:
        load_config(QUICKSTART, ["algorithm.name=fedstaleweight", "privacy.enabled=true",
                                 "privacy.noise_multiplier=1.0"])
    text = str(err.value)
    assert "\n" not in text and "'algorithm.name' has value 'fedstaleweight'" in text and "since the run" in text


def test_fedstaleweight_waits_for_no_straggler_unless_a_limit_is_given():
    assert load_config(QUICKSTART, ["algorithm.name=fedstaleweight"]).algorithm.staleness_limit is None
    assert load_config(QUICKSTART, ["algorithm.name=fedstaleweight",
                                    "algorithm.staleness_limit=3"]).algorithm.staleness_limit == 3


@pytest.mark.parametrize("form", ["model", "delta"])
def test_fedstaleweight_takes_the_server_optimizers_in_both_forms_with_its_weights_as_coefficients(form):
    """w′ = w_t + Σ p_k Δ_k, so both forms step on Σ p_k Δ_k; momentum at β₁ = 0, lr = 1 takes it once. The hand
    sequence's t = 2 from w_2 = [0, 2]: 4/13·[2, 0] + 3/13·[0, −1] + 6/13·[1, 1] = [14, 3]/13."""
    cfg = load_config(QUICKSTART, ["algorithm.name=fedstaleweight", "algorithm.fedstaleweight.offset=0",
                                   "algorithm.server_opt.name=momentum",
                                   "algorithm.server_opt.beta1=0", "algorithm.server_opt.lr=1",
                                   f"algorithm.server_opt.pseudo_gradient={form}"]).algorithm
    memory = memory_of(cfg)
    memory.load_state_dict({"devices": {0: T([2, 0]), 1: T([1, 1])}})  # the state after the hand sequence's t = 1
    w = {0: T([0.0, 0.0]), 1: T([0.0, 0.0]), 2: T([0.0, 2.0])}
    updates = [up(0, 0, [2.0, 0.0]), up(1, 2, [0.0, 1.0]), up(2, 1, [1.0, 1.0])]
    res = aggregate(cfg, 2, w[2], updates, w.__getitem__, memory=memory)
    new = ServerOptimizer(cfg).apply(w[2], res, updates, w.__getitem__)
    assert (new - w[2]).tolist() == pytest.approx([14 / 13, 3 / 13], abs=1e-6)


# ---- its key ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, allowed", [("-1", ">= 0"), (".inf", "finite"), ("one", "number")])
def test_a_bad_offset_is_refused_in_one_line_naming_it(value, allowed):
    with pytest.raises(ConfigError) as err:
        load_config(QUICKSTART, ["algorithm.name=fedstaleweight", f"algorithm.fedstaleweight.offset={value}"])
    text = str(err.value)
    assert "\n" not in text and "'algorithm.fedstaleweight.offset'" in text and allowed in text, text


def test_the_fedstaleweight_section_is_left_out_of_config_yaml_at_its_default():
    assert "fedstaleweight:\n" not in dump_config(load_config(QUICKSTART, ["algorithm.name=fedstaleweight"]))
    assert "  fedstaleweight:\n    offset: 0.0\n" in dump_config(load_config(QUICKSTART, [
        "algorithm.name=fedstaleweight", "algorithm.fedstaleweight.offset=0"]))
