"""A user's stateful rule (tests/user_extensions.py ``fair_momentum``, algo/memory.py) in whole runs: the state the
server snapshots at the end of aggregation t is bit for bit the same after aggregation t + 1 (a reference is a
snapshot), summary.json gives its size, every checkpoint holds it (``rule_state``), and a run killed during
aggregation 3 (checkpoint at 2) resumes to the uninterrupted run's bytes: with the state of aggregation 2, not a
fresh one (a resume without it gives other models). A state value no checkpoint can hold stops the run at the
first checkpoint, in one line naming algorithm.name and where the value is. The torchrun run of the same rule: tests/dist/test_equivalence.py.
"""
import os
import signal

import pytest
import torch

import in_process
from one_line import one_error_line
from resuming import (aggregations_in, assert_same_run, checkpoint_path, checkpoint_versions, cli, reference,
                      run_args, summary)
from rule_states import STATEFUL, assert_bitwise, deep_clone
from seafl_dist.runtime.snapshots import Snapshots
from small_runs import QUICKSTART, SMALL
from user_extensions import write

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]
ARGS = [*SMALL, *STATEFUL, *EVERY_2]
LENET5 = 61706  # LeNet-5's entries on the digits (8x8, 10 classes): the momentum m is one float32 of each


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run in this process, with each end of aggregation's snapshot of the rule's state recorded beside a deep
    clone of it taken then: (run dir, [(version, the state snapshotted, its clone)])."""
    seen = []
    consistent = Snapshots._consistent

    def recording(self, version, *args, **kwargs):
        consistent(self, version, *args, **kwargs)
        seen.append((version, self._snap["rule_state"], deep_clone(self._snap["rule_state"])))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Snapshots, "_consistent", recording)
        out = reference(tmp_path_factory.mktemp("stateful") / "ref", ARGS)
    return out, seen


def test_each_snapshot_of_the_state_is_unchanged_by_the_aggregations_after_it(uninterrupted):
    _, seen = uninterrupted
    assert [v for v, _, _ in seen] == [0, 1, 2, 3, 4, 5, 6] and seen[0][1] == {}  # the start: no state yet
    for version, state, clone in seen:  # checked at the run's end: after every later aggregation
        assert_bitwise(state, clone, f"the state snapshotted at aggregation {version}")
    assert len({id(s) for _, s, _ in seen}) == 7  # a new mapping each aggregation
    # each aggregation aggregates K = 2 updates (none rejected here): the counts grow by 2 a step
    assert [sum(s["seen"].values()) for _, s, _ in seen[1:]] == [2, 4, 6, 8, 10, 12]


def test_summary_gives_the_states_keys_and_bytes(uninterrupted):
    out, _ = uninterrupted
    assert summary(out)["rule_state"] == {"keys": ["m", "seen"], "tensors": 1, "bytes": 4 * LENET5}


def test_a_run_killed_during_aggregation_3_resumes_with_the_state_of_aggregation_2(uninterrupted, tmp_path,
                                                                                   monkeypatch):
    ref, seen = uninterrupted
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = tmp_path / "run"
    stopped = cli(*run_args(ARGS, out), fault="during_aggregate:3")
    assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-3000:]
    assert checkpoint_versions(out) == [2] and aggregations_in(out) == 3
    held = torch.load(checkpoint_path(out, 2), map_location="cpu", weights_only=True)["rule_state"]
    assert_bitwise(held, seen[2][2], "the checkpoint's rule_state")  # aggregation 2's, in full

    resumed = cli(*run_args(ARGS, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {out} after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)


LISTING = '''
from seafl_dist.algo import AggregationResult


def listing(cfg, version, global_flat, updates, base_model, *, state):
    """Keeps a list in its state: a value no checkpoint holds."""
    return AggregationResult(global_flat.clone(), [{"weight": 0.0} for _ in updates],
                             state={"cache": {3: [version]}})
'''


def test_a_state_value_a_checkpoint_cannot_hold_stops_the_run_at_the_checkpoint_in_one_line(tmp_path):
    name = write(tmp_path, source=LISTING)
    out = tmp_path / "run"
    proc = in_process.seafl("run", QUICKSTART, *SMALL, f"algorithm.name={name}:listing",
                            "algorithm.staleness_limit=null", *EVERY_2, "--out", out, cwd=tmp_path)
    assert proc.returncode != 0
    line = one_error_line(proc.stderr)
    assert f"'algorithm.name' has value '{name}:listing'" in line and "its state's 'cache'[3] is list" in line, line
    assert aggregations_in(out) == 2 and summary(out)["status"] == "failed"
