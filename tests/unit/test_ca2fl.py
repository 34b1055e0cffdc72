"""CA²FL (algorithm.name=ca2fl, algo/ca2fl.py) against its paper's Algorithm 2 written again here, over sequences of
aggregations with the cache carried between them; its state never written in place; its refusals; its cache sized
from the schedule before anything trains (runtime/ca2fl_cache.py)."""
import copy
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, strategies as st

from one_line import one_line
from seafl_dist.algo import BufferedUpdate, FlatParts, RuleMemory, aggregate
from seafl_dist.runtime.ca2fl_cache import check_cache
from seafl_dist.settings import AlgorithmConfig, ConfigError, config_from_dict

F64 = torch.float64
D = 5  # entries of the flat model in the property tests


def alg(n, eta=1.0, **kw):
    cfg = AlgorithmConfig(name="ca2fl", server_lr=eta, **kw)
    cfg.num_devices = n  # as the config (devices.num) or runtime/setup.py's prepare resolves it
    return cfg


# ---- the paper's Algorithm 2, on plain tensors --------------------------------------------------------------

class PaperCA2FL:
    """Wang et al. (ICLR 2024), Algorithm 2, in float64: h_1^i = 0 for every i ∈ [N]; a buffer S_t of updates
    Δ^i; v_t = h_t + (1/|S_t|) Σ_{i∈S_t} (Δ^i − h_t^i); x_{t+1} = x_t + η v_t; h_{t+1}^i = Δ^i for the devices of
    S_t (the later one of a device that sent two), h_{t+1}^j = h_t^j otherwise; h_{t+1} = (1/N) Σ_{i∈[N]} h_{t+1}^i.
    An update that is not finite never reaches S_t; a buffer left empty takes no step."""

    def __init__(self, n, eta, d):
        self.eta, self.h = eta, [torch.zeros(d, dtype=F64) for _ in range(n)]

    def step(self, x, received):
        """``received``: [(device i, Δ^i or None for a rejected update)] in arrival order; returns x_{t+1}."""
        s_t = [(i, delta) for i, delta in received if delta is not None and bool(torch.isfinite(delta).all())]
        if not s_t:
            return x.clone()
        h_t = [h.clone() for h in self.h]
        mean_h = sum(h_t) / len(h_t)
        v = mean_h + sum(delta - h_t[i] for i, delta in s_t) / len(s_t)
        for i, delta in s_t:
            self.h[i] = delta
        return x + self.eta * v


def update(device, job, base, w_base, delta):
    return BufferedUpdate(device=device, job=job, base_version=base, n_samples=10, epochs=1, flat=w_base + delta)


KINDS = st.sampled_from(["ok", "ok", "ok", "nan", "inf"])


@st.composite
def runs(draw):
    """N devices, η, and T aggregations of K (drawn each time, 1 to 4) updates: devices drawn from [N] (so seen
    twice, in one buffer or across them, and some never), each from a base version drawn up to t (stale bases),
    some non-finite."""
    n = draw(st.integers(1, 6))
    eta = draw(st.sampled_from([1.0, 0.5, 2.0]))
    steps = []
    for t in range(draw(st.integers(1, 5))):
        k = draw(st.integers(1, 4))
        steps.append([(draw(st.integers(0, n - 1)), draw(st.integers(0, t)), draw(KINDS),
                       draw(st.integers(0, 2 ** 16))) for _ in range(k)])
    return n, eta, steps


@given(runs())
def test_ca2fl_is_the_papers_algorithm_over_a_sequence_of_aggregations(run):
    n, eta, steps = run
    cfg, memory = alg(n, eta), RuleMemory("ca2fl", True)
    versions = [torch.linspace(-1.0, 1.0, D)]
    paper = PaperCA2FL(n, eta, D)
    job = 0
    for t, buffer in enumerate(steps):
        ups, received = [], []
        for device, base, kind, seed in buffer:
            delta = torch.randn(D, generator=torch.Generator().manual_seed(seed)) * 0.1
            if kind != "ok":
                delta[seed % D] = float(kind)
            u = update(device, job, base, versions[base], delta)
            job += 1
            ups.append(u)
            received.append((device, None if kind != "ok" else u.flat.to(F64) - versions[base].to(F64)))
        res = aggregate(cfg, t, versions[t], ups, versions.__getitem__, memory=memory)
        expected = paper.step(versions[t].to(F64), received)
        assert torch.allclose(res.new_global.to(F64), expected, atol=1e-5), (t, res.new_global, expected)
        accepted = [d for d, (_, delta) in zip(res.info, received) if delta is not None]
        assert [d["rejected"] for d in res.info] == [delta is None for _, delta in received]
        assert all(d["weight"] == pytest.approx(eta / len(accepted)) for d in accepted)
        cache = memory.state.get("cache", {})
        seen = {i for i in range(n) if bool(paper.h[i].any())}
        assert set(cache) == seen  # sparse: only the devices with an accepted update, never a zero per device
        for i in seen:
            assert torch.allclose(cache[i].to(F64), paper.h[i], atol=1e-6)
        if seen:
            assert torch.allclose(memory.state["sum"], sum(paper.h), atol=1e-6)
        versions.append(res.new_global)


def test_a_device_twice_in_one_buffer_is_calibrated_twice_with_its_cache_from_before():
    """N = 2, η = 1. Aggregation 1: device 0 sends a = 1 (calibrated with h_1 = 0: w_1 = 1), so h^0 = 1, h = 1/2.
    Aggregation 2: device 0 twice
    (b = 4, then c = 6), device 1 once (e = 3): v = h + ((b − h^0) + (c − h^0) + (e − 0)) / 3 = 0.5 + (3 + 5 + 3) / 3,
    and the cache keeps c, the later one."""
    cfg, memory = alg(2), RuleMemory("ca2fl", True)
    w0 = torch.zeros(1)
    w1 = aggregate(cfg, 0, w0, [update(0, 0, 0, w0, torch.ones(1))], {0: w0}.__getitem__, memory=memory).new_global
    assert w1.item() == 1.0
    ups = [update(0, 1, 1, w1, torch.tensor([4.0])), update(0, 2, 1, w1, torch.tensor([6.0])),
           update(1, 3, 0, w0, torch.tensor([3.0]))]
    res = aggregate(cfg, 1, w1, ups, {0: w0, 1: w1}.__getitem__, memory=memory)
    assert res.new_global.item() == pytest.approx(w1.item() + 0.5 + (3.0 + 5.0 + 3.0) / 3)
    assert [d["cached"] for d in res.info] == [True, True, False]
    assert memory.state["cache"][0].item() == 6.0 and memory.state["cache"][1].item() == 3.0
    assert memory.state["sum"].item() == 9.0


def test_an_update_the_guard_rejects_leaves_its_devices_cache_as_it_was():
    """Four updates from w_0 = 0, one far above the others' median (update_norm_factor 3): the guard removes it
    before the rule, so its device keeps h = its earlier delta and K = 3."""
    cfg, memory = alg(4, update_norm_factor=3.0), RuleMemory("ca2fl", True)
    w0 = torch.zeros(2)
    first = aggregate(cfg, 0, w0, [update(3, 0, 0, w0, torch.tensor([0.5, 0.0]))], {0: w0}.__getitem__,
                      memory=memory).new_global  # h_1 = 0 before it: w_1 = (0.5, 0), then h^3 = (0.5, 0)
    assert torch.allclose(first, torch.tensor([0.5, 0.0]))
    deltas = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [90.0, 0.0]]
    ups = [update(i, 1 + i, 1, first, torch.tensor(d)) for i, d in enumerate(deltas)]
    res = aggregate(cfg, 1, first, ups, {0: w0, 1: first}.__getitem__, memory=memory)
    assert [d["rejected"] for d in res.info] == [False, False, False, True]
    mean_h = torch.tensor([0.5, 0.0]) / 4
    expected = first + mean_h + (torch.tensor([2.0, 2.0]) - 0.0) / 3
    assert torch.allclose(res.new_global, expected)
    assert memory.state["cache"][3].tolist() == [0.5, 0.0]


def test_a_buffer_of_rejected_updates_takes_no_step_and_keeps_the_state():
    cfg, memory = alg(3), RuleMemory("ca2fl", True)
    w0 = torch.zeros(2)
    aggregate(cfg, 0, w0, [update(1, 0, 0, w0, torch.ones(2))], {0: w0}.__getitem__, memory=memory)
    before = memory.state
    bad = update(2, 1, 0, w0, torch.tensor([float("nan"), 0.0]))
    res = aggregate(cfg, 1, torch.ones(2), [bad], {0: w0, 1: torch.ones(2)}.__getitem__, memory=memory)
    assert torch.equal(res.new_global, torch.ones(2)) and res.info[0]["rejected"]
    assert set(memory.state["cache"]) == {1} and memory.state["cache"] is before["cache"]


def test_integer_counters_take_the_largest_value_not_a_step():
    parts = FlatParts(params=torch.tensor([True, False]), stats=torch.tensor([False, False]),
                      counters=torch.tensor([False, True]))
    cfg, memory = alg(2, eta=0.5), RuleMemory("ca2fl", True)
    w0 = torch.tensor([0.0, 7.0])
    ups = [update(0, 0, 0, w0, torch.tensor([2.0, 3.0])), update(1, 1, 0, w0, torch.tensor([4.0, 1.0]))]
    res = aggregate(cfg, 0, w0, ups, {0: w0}.__getitem__, parts, memory=memory)
    assert res.new_global.tolist() == [0.5 * (0.0 + 3.0), 10.0]  # η (h = 0, mean Δ = 3); the counter max(7, 10, 8)


def test_the_state_is_never_written_in_place():
    """A deep copy of the state after aggregation t is bitwise the state object the server still holds after
    aggregation t + 1 (which replaced devices 0 and 2 of three cached): no tensor of it was written."""
    cfg, memory = alg(4), RuleMemory("ca2fl", True)
    w0 = torch.zeros(3)
    first = [update(i, i, 0, w0, torch.full((3,), float(i + 1))) for i in range(3)]
    w1 = aggregate(cfg, 0, w0, first, {0: w0}.__getitem__, memory=memory).new_global
    held = memory.state
    snapshot = copy.deepcopy(dict(held))
    later = [update(0, 3, 1, w1, torch.tensor([5.0, -1.0, 2.0])), update(2, 4, 0, w0, torch.tensor([0.5, 0.5, 9.0]))]
    aggregate(cfg, 1, w1, later, {0: w0, 1: w1}.__getitem__, memory=memory)
    assert set(held["cache"]) == set(snapshot["cache"]) == {0, 1, 2}
    for i, h in snapshot["cache"].items():
        assert torch.equal(held["cache"][i], h) and held["cache"][i].dtype == h.dtype
    assert torch.equal(held["sum"], snapshot["sum"])
    assert memory.state["cache"][1] is held["cache"][1]  # the unchanged device's tensor is shared, not copied
    assert memory.state is not held and not torch.equal(memory.state["sum"], held["sum"])


# ---- refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, named, says", [
    ({"privacy": {"enabled": True, "noise_multiplier": 1.0}}, "algorithm.name", "every past contributor"),
    ({"algorithm": {"server_opt": {"name": "adam", "pseudo_gradient": "delta"}}},
     "algorithm.server_opt.pseudo_gradient", "model with algorithm.name=ca2fl"),
    ({"algorithm": {"ca2fl": {"max_cache_gb": 0}}}, "algorithm.ca2fl.max_cache_gb", "> 0"),
    ({"algorithm": {"ca2fl": {"max_cache_gb": "lots"}}}, "algorithm.ca2fl.max_cache_gb", "a number"),
])
def test_what_ca2fl_cannot_take_is_refused_in_one_line(overrides, named, says):
    tree = {"algorithm": {"name": "ca2fl", **overrides.get("algorithm", {})},
            **{k: v for k, v in overrides.items() if k != "algorithm"}}
    with pytest.raises(ConfigError) as err:
        config_from_dict(tree)
    text = one_line(str(err.value))
    assert f"config key '{named}'" in text and says in text


def test_ca2fl_takes_the_model_form_of_a_server_optimizer():
    cfg = config_from_dict({"algorithm": {"name": "ca2fl", "server_opt": {"name": "adam"}}})
    assert cfg.algorithm.server_opt.pseudo_gradient == "model" and cfg.algorithm.staleness_limit is None


# ---- the cache's size, before anything trains ------------------------------------------------------------------

def experiment(cfg, numel, aggregated):
    """What check_cache reads of a prepared run: its config, N, the flat model, and a schedule of these buffers."""
    events = [{"event": "start", "device": 0}] + [{"event": "aggregate", "updates": [{"device": d} for d in devs]}
                                                  for devs in aggregated]
    return SimpleNamespace(cfg=cfg, num_devices=cfg.devices.num, initial_flat=lambda: torch.zeros(numel),
                           schedule=lambda: iter(events))


def test_a_cache_over_its_limit_is_refused_with_its_memory_and_disk(tmp_path):
    """N = 50, K = 5, 4 aggregations: the bound K·T = 20 devices of 1,000,000 entries (80 MB) exceeds 0.05 GB, so
    the schedule is walked: 7 distinct devices, 7 × 4 MB + 8 MB = 36 MB of memory, 3 × that on disk: within."""
    cfg = config_from_dict({"algorithm": {"name": "ca2fl", "buffer_size": 5, "ca2fl": {"max_cache_gb": 0.05}},
                            "devices": {"num": 50}, "run": {"max_aggregations": 4}})
    buffers = [[0, 1, 2, 3, 4], [0, 5, 1, 2, 3], [6, 0, 0, 1, 2], [3, 4, 5, 6, 0]]
    check_cache(cfg, experiment(cfg, 10 ** 6, buffers), tmp_path, free=10 ** 12)
    cfg.algorithm.ca2fl.max_cache_gb = 0.03
    with pytest.raises(ConfigError) as err:
        check_cache(cfg, experiment(cfg, 10 ** 6, buffers), tmp_path, free=10 ** 12)
    text = one_line(str(err.value))
    assert "config key 'algorithm.ca2fl.max_cache_gb' has value 0.03" in text
    assert "the 7 devices" in text and "36.0 MB of memory" in text and "108.0 MB of disk" in text
    with pytest.raises(ConfigError) as err:  # within the memory limit, but not on this disk
        check_cache(cfg, experiment(cfg, 10 ** 5, buffers), tmp_path, free=5 * 10 ** 6)
    assert "10.8 MB of disk" in str(err.value) and "5.0 MB free" in str(err.value)


def test_the_limit_is_in_gb_not_gib(tmp_path):
    """7 devices of 850,000 entries: 36 × 850,000 = 30.6 MB, over 0.03 GB (30,000,000 bytes) though under 0.03 GiB."""
    cfg = config_from_dict({"algorithm": {"name": "ca2fl", "buffer_size": 5, "ca2fl": {"max_cache_gb": 0.03}},
                            "devices": {"num": 50}, "run": {"max_aggregations": 4}})
    buffers = [[0, 1, 2, 3, 4], [0, 5, 1, 2, 3], [6, 0, 0, 1, 2], [3, 4, 5, 6, 0]]
    with pytest.raises(ConfigError) as err:
        check_cache(cfg, experiment(cfg, 850_000, buffers), tmp_path, free=10 ** 12)
    assert "the 7 devices" in str(err.value) and "more than the limit of 0.03 GB" in str(err.value)


def test_the_default_limit_is_16_gb_and_null_is_none():
    """5,000 devices of 10^6 entries (a run stopped by a target: every device counts): 4 MB × 5,000 + 8 MB = 20.0 GB,
    refused with max_cache_gb unset (16 GB), taken with max_cache_gb null."""
    def cfg(ca2fl):
        return config_from_dict({"algorithm": {"name": "ca2fl", "ca2fl": ca2fl}, "devices": {"num": 5000},
                                 "run": {"max_aggregations": None, "target_accuracy": 0.9}})
    unset = cfg({})
    with pytest.raises(ConfigError) as err:
        check_cache(unset, experiment(unset, 10 ** 6, [[0]]), "/nonexistent/run", free=10 ** 14)
    assert "has value 16.0" in str(err.value) and "more than the limit of 16 GB" in str(err.value)
    unlimited = cfg({"max_cache_gb": None})
    assert unlimited.algorithm.ca2fl.max_cache_gb is None
    check_cache(unlimited, experiment(unlimited, 10 ** 6, [[0]]), "/nonexistent/run", free=10 ** 14)


def test_a_run_without_a_limit_on_its_length_counts_every_device():
    cfg = config_from_dict({"algorithm": {"name": "ca2fl", "ca2fl": {"max_cache_gb": 0.001}},
                            "devices": {"num": 40}, "run": {"max_aggregations": None, "target_accuracy": 0.9}})
    with pytest.raises(ConfigError) as err:
        check_cache(cfg, experiment(cfg, 10 ** 4, [[0]]), "/nonexistent/run", free=10 ** 12)
    assert "the 40 devices" in str(err.value) and "1.7 MB of memory" in str(err.value)  # 40·4e4 + 8e4 bytes
