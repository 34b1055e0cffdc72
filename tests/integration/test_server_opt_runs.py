"""A server optimizer (algorithm.server_opt) end to end: the trace's weights stay the rule's, a rule of one's
own takes an optimizer too, and a run killed in the middle with Adam resumes to the same bytes (its m and v
are in the checkpoint)."""
import json

import pytest
import torch

from resuming import assert_same_run, checkpoint_path, checkpoint_versions, cli, reference, run_args
from small_runs import SMALL
from user_extensions import EXTENDED, write

ADAM = ["algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01"]


def events(run, kind):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == kind]


@pytest.mark.parametrize("rule", ["fedbuff", "own"])
def test_the_trace_records_the_rules_weights_and_the_optimizer_moves_the_model(rule, tmp_path, monkeypatch):
    """FedBuff's weights (η_g c_k / |B|) and a rule of one's own (a plain mean, model form) do not depend on the
    models, so the aggregate events of a run with Adam are those of the run without; its models are not."""
    if rule == "own":
        monkeypatch.syspath_prepend(str(tmp_path))
        algo = EXTENDED(write(tmp_path))
    else:
        algo = ["algorithm.name=fedbuff"]
    plain = reference(tmp_path / "plain", [*SMALL, *algo])
    adam = reference(tmp_path / "adam", [*SMALL, *algo, *ADAM])
    assert events(adam, "aggregate") == events(plain, "aggregate")
    assert [e["loss"] for e in events(adam, "eval")][1:] != [e["loss"] for e in events(plain, "eval")][1:]
    assert (adam / "model.pt").read_bytes() != (plain / "model.pt").read_bytes()
    assert "server_opt:\n    name: adam\n    lr: 0.01" in (adam / "config.yaml").read_text()


def test_a_run_killed_in_the_middle_with_adam_resumes_to_the_same_bytes(tmp_path):
    """SEAFL with Adam on the delta form, killed during aggregation 3 (checkpoint at 2): the resumed run must
    take m and v from the checkpoint, or its third step differs."""
    args = [*SMALL, *ADAM, "algorithm.server_opt.pseudo_gradient=delta", "run.checkpoint_every=2",
            "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    out = tmp_path / "run"
    stopped = cli(*run_args(args, out), fault="during_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    state = torch.load(checkpoint_path(out, 2), weights_only=True)["server_opt"]
    assert state["steps"] == 2 and state["m"].dtype == state["v"].dtype == torch.float64
    assert bool(state["m"].abs().sum() > 0) and bool((state["v"] != 1e-3 ** 2).any())
    resumed = cli(*run_args(args, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr and "after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)
