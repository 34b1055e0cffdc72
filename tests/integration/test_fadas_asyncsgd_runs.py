"""FADAS and asyncsgd end to end (issue 62, items 2 and 7): each reaches 90% test accuracy on the bundled digits
(configs/quickstart.yaml) within a stated budget of aggregations, in this process; and a FADAS run killed in the
middle resumes to the uninterrupted run's bytes, its AMSGrad m, v and v̂ taken from the checkpoint."""
import json

import pytest
import torch

from resuming import killed_during_3, reference, resumed_from_2
from small_runs import SMALL

# Budgets found by running (seed 0): fadas reached 90% at aggregation 10 (K = 5), asyncsgd at 50 (K = 1, η = 0.5,
# M = 5); stated with a margin of 2× and 1.6×
LEARNS = {"fadas": (["algorithm.name=fadas"], 20),
          "asyncsgd": (["algorithm.name=asyncsgd", "algorithm.asyncsgd.lr=0.5", "devices.concurrency=5",
                        "run.eval_every=5"], 80)}


@pytest.mark.parametrize("name", list(LEARNS))
def test_it_reaches_90_percent_on_the_digits_within_its_budget(name, tmp_path):
    extra, budget = LEARNS[name]
    out = reference(tmp_path / name, [*extra, "run.target_accuracy=0.9", f"run.max_aggregations={budget}",
                                      "logging.progress=none"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_accuracy"] >= 0.9, (name, summary["best_accuracy"], summary["aggregations"])
    assert summary["aggregations"] <= budget


def test_a_fadas_run_killed_in_the_middle_resumes_to_the_same_bytes(tmp_path):
    """FADAS with every update stale (τ_C = 0, so the delay-adaptive η acts), killed during aggregation 3
    (checkpoint at 2): the resumed run must take m, v and v̂ from the checkpoint, or its third step differs."""
    args = [*SMALL, "algorithm.name=fadas", "algorithm.server_opt.delay_threshold=0", "run.checkpoint_every=2",
            "run.checkpoint_every_s=null"]
    ref = reference(tmp_path / "ref", args)
    out = tmp_path / "run"
    state = killed_during_3(args, out)["server_opt"]
    assert state["steps"] == 2 and state["vmax"].dtype == torch.float64 and bool((state["vmax"] >= state["v"]).all())
    resumed_from_2(ref, args, out)
