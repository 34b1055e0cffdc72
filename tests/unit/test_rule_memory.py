"""A rule with memory (algo/memory.py, issue 62, 1), by a user's rule named by import path
(tests/user_extensions.py ``fair_momentum``): the state it gets is read-only and the previous call's, a state that is
no mapping is refused in one line naming algorithm.name, a value a checkpoint cannot hold is refused naming its path
inside the state, the state's size counts shared storage once, the rule is called when the guard rejected every
update, the held state is no dict the rule can still write, a checkpoint holds its snapshot's state (not a later
one) and a stateless rule's none, and over random sequences of buffers the rule, carried by ``aggregate``, gives its equations' models (the
oracle below, with no call into seafl_dist) without writing the state it was handed."""
import math
from types import MappingProxyType, SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from seafl_dist.algo import AggregationResult, BufferedUpdate, aggregate, memory_of
from seafl_dist.algo import dispatch
from seafl_dist.algo.guard import NormHistory
from seafl_dist.algo.memory import RuleMemory, state_size, to_cpu
from seafl_dist.privacy.record_accountant import NoLedger
from seafl_dist.runtime import snapshots
from seafl_dist.settings import ConfigError, config_from_dict
from rule_states import STATEFUL, assert_bitwise, deep_clone
from user_extensions import fair_momentum

RULE = "user_extensions:fair_momentum"


def algorithm(*extra):
    return config_from_dict({}, [*STATEFUL, *extra]).algorithm


def update(device, flat, base_version=0, job=0):
    return BufferedUpdate(device=device, job=job, flat=flat, n_samples=10, base_version=base_version, epochs=1)


def oracle(rounds, w0, beta=0.5):
    """fair_momentum from its equations (tests/user_extensions.py's docstring), in float64 lists: ``rounds`` a list of
    buffers, each a list of (device, Δ, finite?); the models w_1, w_2, ... A buffer with no finite update leaves w_t,
    m and the counts as they were."""
    w, m, seen, out = list(w0), None, {}, []
    for buffer in rounds:
        kept = [(dev, delta) for dev, delta, finite in buffer if finite]
        if kept:
            raw = [1.0 / (1 + seen.get(dev, 0)) for dev, _ in kept]  # the counts before this buffer
            step = [sum(r / sum(raw) * d[j] for r, (_, d) in zip(raw, kept)) for j in range(len(w))]
            for dev, _ in kept:
                seen[dev] = seen.get(dev, 0) + 1
            m = step if m is None else [beta * a + b for a, b in zip(m, step)]
            w = [a + b for a, b in zip(w, m)]
        out.append(list(w))
    return out


D = 3
entry = st.tuples(st.integers(0, 5),  # device: 6 of them, some never drawn in a sequence
                  st.lists(st.integers(-8, 8).map(lambda x: x / 4), min_size=D, max_size=D),  # Δ
                  st.booleans().map(lambda nan: not nan) | st.just(True),  # finite? (mostly)
                  st.integers(0, 3))  # how many versions stale its base is (capped at t)
sequences = st.lists(st.lists(entry, min_size=1, max_size=4), min_size=1, max_size=6)  # K = 1 to 4, up to 6 steps


@given(sequences, st.sampled_from([0.0, 0.5, 0.9]))
def test_the_rule_carried_by_aggregate_gives_its_equations_and_never_writes_the_state_it_had(rounds, beta):
    cfg = algorithm(f"algorithm.params.beta={beta}")
    memory = memory_of(cfg)
    assert memory.stateful and dict(memory.state) == {}
    w = {0: torch.tensor([0.5, -1.0, 2.0])}
    plan = []  # the oracle's rounds: (device, Δ, finite?)
    for t, buffer in enumerate(rounds):
        ups, row = [], []
        for j, (dev, delta, finite, stale) in enumerate(buffer):
            base = max(0, t - stale)
            flat = w[base] + torch.tensor(delta) if finite else torch.full((D,), float("nan"))
            ups.append(update(dev, flat, base, job=10 * t + j))
            row.append((dev, delta, finite))
        plan.append(row)
        before, clone = memory.state, deep_clone(memory.state)
        result = aggregate(cfg, t, w[t], ups, w.__getitem__, memory=memory)
        assert_bitwise(before, clone)  # the state of aggregation t untouched by aggregation t + 1
        assert [i["rejected"] for i in result.info] == [not f for _, _, f in row]
        w[t + 1] = result.new_global
    expected = oracle(plan, [0.5, -1.0, 2.0], beta)
    for t, want in enumerate(expected, start=1):
        assert torch.allclose(w[t].double(), torch.tensor(want, dtype=torch.float64), atol=1e-4), (t, w[t], want)
    seen = {}
    for row in plan:
        for dev, _, finite in row:
            seen[dev] = seen.get(dev, 0) + finite
    assert dict(memory.state.get("seen", {})) == {d: c for d, c in seen.items() if c}


def test_the_state_it_gets_is_read_only_and_the_previous_calls(monkeypatch):
    got = []

    def spy(cfg, version, global_flat, updates, base_model, *, state):
        got.append(state)
        with pytest.raises(TypeError):
            state["m"] = torch.zeros(1)  # a MappingProxyType: no writing into what the server snapshotted
        return fair_momentum(cfg, version, global_flat, updates, base_model, state=state)

    monkeypatch.setattr(dispatch, "rule_of", lambda cfg: spy)
    cfg, memory = algorithm(), RuleMemory(RULE, True)
    w0 = torch.zeros(2)
    first = aggregate(cfg, 0, w0, [update(4, torch.tensor([1.0, 2.0]))], lambda v: w0, memory=memory)
    aggregate(cfg, 1, first.new_global, [update(4, torch.tensor([2.0, 2.0]), 1)], lambda v: first.new_global,
              memory=memory)
    assert [type(s) for s in got] == [MappingProxyType, MappingProxyType] and dict(got[0]) == {}
    assert got[1]["m"].tolist() == [1.0, 2.0] and dict(got[1]["seen"]) == {4: 1}  # what call 1 returned


def test_called_when_the_guard_rejects_every_update(monkeypatch):
    """update_norm_factor 2 against a history of norms 0.01: the one update (norm 5) is rejected before the rule
    runs, and the stateful rule is still called, with no update, and its state kept (fair_momentum returns it)."""
    calls = []

    def spy(cfg, version, global_flat, updates, base_model, *, state):
        calls.append((version, list(updates), dict(state)))
        return fair_momentum(cfg, version, global_flat, updates, base_model, state=state)

    monkeypatch.setattr(dispatch, "rule_of", lambda cfg: spy)
    cfg, memory = algorithm("algorithm.update_norm_factor=2"), RuleMemory(RULE, True)
    memory.load_state_dict({"m": torch.tensor([1.0, 0.0]), "seen": {3: 1}})
    kept = memory.state
    w = torch.tensor([1.0, 1.0])
    result = aggregate(cfg, 7, w, [update(2, torch.tensor([4.0, 5.0]), 7)], lambda v: w,
                       history=NormHistory([0.01] * 5), memory=memory)
    assert [(v, u) for v, u, _ in calls] == [(7, [])]
    assert result.info[0]["rejected"] and "update norm" in result.info[0]["reason"]
    assert result.new_global.tolist() == [1.0, 1.0] and memory.state is kept


def returning(new_state):
    """A stateful rule that keeps w_t and returns ``new_state`` as its state."""
    def rule(cfg, version, global_flat, updates, base_model, *, state):
        return AggregationResult(global_flat.clone(), [{"weight": 0.0} for _ in updates], state=new_state)
    return rule


@pytest.mark.parametrize("bad, says", [(None, "its result's state (None) is NoneType, not a mapping"),
                                       ([1, 2], "its result's state is list, not a mapping"),
                                       ({0: torch.zeros(1)}, "its result's state has the key 0")])
def test_a_state_that_is_no_mapping_is_one_line_naming_algorithm_name(bad, says):
    memory = RuleMemory(RULE, True)
    w = torch.zeros(2)
    with pytest.raises(ConfigError) as err:
        memory.call(returning(bad), algorithm(), 0, w, [update(0, w + 1)], lambda v: w)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"config key 'algorithm.name' has value '{RULE}': {says}"), line
    assert dict(memory.state) == {}  # the refused state is not kept


class Opaque:
    pass


@pytest.mark.parametrize("value, path, kind", [([torch.zeros(1)], "'cache'[7]", "list"),
                                               (Opaque(), "'cache'[7]", "Opaque"),
                                               ({"h": (1, 2)}, "'cache'[7]['h']", "tuple")])
def test_a_value_a_checkpoint_cannot_hold_is_refused_naming_its_path_in_the_state(value, path, kind):
    """Accepted when returned (only the top level is checked at each aggregation), refused when a checkpoint
    writes it (RuleMemory.of_snapshot), in one line naming algorithm.name and where in the state the value is."""
    memory = RuleMemory(RULE, True)
    state = {"m": torch.ones(2), "cache": {3: torch.zeros(2), 7: value}}
    w = torch.zeros(2)
    memory.call(returning(state), algorithm(), 0, w, [update(0, w + 1)], lambda v: w)
    with pytest.raises(ConfigError) as err:
        memory.of_snapshot(memory.state)
    line = str(err.value)
    assert "\n" not in line and f"'algorithm.name' has value '{RULE}'" in line
    assert f"its state's {path} is {kind}" in line, line


def test_what_a_checkpoint_holds_is_plain_dicts_of_cpu_tensors_sharing_nothing_with_the_run():
    m = torch.arange(3.0, requires_grad=True) * 1
    held = to_cpu(RULE, MappingProxyType({"m": m, "seen": MappingProxyType({4: 2, 9: None}), "tag": "x"}))
    assert type(held) is dict and type(held["seen"]) is dict and held["seen"] == {4: 2, 9: None}
    assert held["tag"] == "x" and not held["m"].requires_grad and held["m"].tolist() == [0.0, 1.0, 2.0]


def test_the_states_size_counts_storage_shared_by_two_entries_once():
    cache = torch.zeros(10)  # 40 bytes
    other = torch.zeros(3, dtype=torch.float64)  # 24 bytes
    state = {"m": cache, "view": cache[2:5], "cache": {0: other, 1: other, 2: torch.zeros(0)}, "n": 3, "tag": "x"}
    assert state_size(state) == {"tensors": 5, "bytes": 40 + 24}
    assert state_size({}) == state_size(None) == {"tensors": 0, "bytes": 0}
    assert state_size({"a": torch.zeros(4), "b": torch.zeros(4)}) == {"tensors": 2, "bytes": 32}  # equal, not shared


def test_summary_gives_the_keys_and_size_only_for_a_stateful_rule():
    memory = RuleMemory(RULE, True)
    memory.load_state_dict({"seen": {1: 1}, "m": torch.zeros(5)})
    assert memory.summary() == {"rule_state": {"keys": ["m", "seen"], "tensors": 1, "bytes": 20}}
    assert RuleMemory("fedbuff", False).summary() == {}
    assert memory_of(algorithm()).stateful and not memory_of(config_from_dict({}, []).algorithm).stateful


def test_a_rules_own_nonfinite_update_leaves_its_device_uncounted():
    """fair_momentum on one finite and one NaN update of the same device: the NaN one is rejected (screen) and
    counts for nothing; the device's count is 1, its weight 1."""
    cfg, memory = algorithm(), RuleMemory(RULE, True)
    w = torch.zeros(2)
    nan = torch.tensor([math.nan, 0.0])
    result = aggregate(cfg, 0, w, [update(5, nan), update(5, torch.tensor([2.0, 4.0]))], lambda v: w, memory=memory)
    assert [i["weight"] for i in result.info] == [0.0, 1.0] and dict(memory.state["seen"]) == {5: 1}
    assert result.new_global.tolist() == [2.0, 4.0]


def test_the_held_state_is_not_the_dict_the_rule_returned():
    """A rule that keeps the dict it returned and writes it later changes neither the held state nor a snapshot."""
    memory, mine = RuleMemory(RULE, True), {"n": 1}
    w = torch.zeros(2)
    memory.call(returning(mine), algorithm(), 0, w, [update(0, w + 1)], lambda v: w)
    mine["n"], mine["late"] = 2, torch.ones(1)
    assert dict(memory.state) == {"n": 1}


def test_a_boolean_key_inside_the_state_is_refused_at_the_checkpoint():
    """Keys inside are strings or integers; True is an int to Python but no integer key to the contract."""
    with pytest.raises(ConfigError) as err:
        RuleMemory(RULE, True).of_snapshot({"seen": {True: 1}})
    assert "\n" not in str(err.value) and "its state's 'seen' has the key True" in str(err.value)


def checkpoint_written(monkeypatch, memory, snap_state):
    """What Snapshots._write_checkpoint hands checkpoint.save for a snapshot holding ``snap_state`` while
    ``memory`` holds whatever it holds now (a server's other parts stood in by no-ops)."""
    saved = {}
    monkeypatch.setattr(snapshots.checkpoint, "save", lambda d, state: saved.update(state))
    monkeypatch.setattr(snapshots, "dump_config", lambda cfg: {})
    monkeypatch.setattr(snapshots.residuals, "retain", lambda d, files: None)
    quiet = SimpleNamespace(flush=lambda sync=False: None, checkpointed=lambda v: None)
    server = SimpleNamespace(
        _snap={"version": 3, "time": 1.0, "versions": {}, "refs": {}, "n_rows": 0, "n_staleness": 0, "counts": {},
               "update_norms": [], "server_opt": None, "rule_state": snap_state, "defense_state": {}, "feedback": None,
               "events_bytes": 0, "metrics_bytes": 0, "privacy": None, "devices": {}, "dp_sgd_steps": None},
        _saved_version=None, executor=SimpleNamespace(), memory=memory, writer=quiet, devices=quiet, privacy=quiet,
        records=NoLedger(),  # no DP-SGD: no step ledger (privacy/record_accountant.py)
        cfg=None, dir=None, rows=[], staleness=[], _wall=lambda: 0.0, profile_sha256=None,
        server_opt=SimpleNamespace(active=False))
    snapshots.Snapshots._write_checkpoint(server)
    return saved


def test_a_checkpoint_holds_its_snapshots_rule_state_not_a_later_one(monkeypatch):
    """The way-out checkpoint after a failure between the rule and the end of aggregation 4: the memory holds
    aggregation 4's state, the snapshot (aggregation 3) its own, and the checkpoint is aggregation 3's."""
    memory = RuleMemory(RULE, True)
    memory.load_state_dict({"m": torch.tensor([1.0]), "seen": {0: 1}})
    at_3 = memory.state
    memory.load_state_dict({"m": torch.tensor([9.0]), "seen": {0: 2}})  # aggregation 4's rule ran
    saved = checkpoint_written(monkeypatch, memory, at_3)
    assert saved["version"] == 3
    assert saved["rule_state"]["m"].tolist() == [1.0] and saved["rule_state"]["seen"] == {0: 1}


def test_a_stateless_rules_checkpoint_has_no_rule_state(monkeypatch):
    saved = checkpoint_written(monkeypatch, RuleMemory("fedbuff", False), MappingProxyType({}))
    assert saved["version"] == 3 and "rule_state" not in saved
