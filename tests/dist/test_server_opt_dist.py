"""A server optimizer under torchrun: W = 3 gives the run dir of one process (issue 40).

The optimizer runs on rank 0 after the rule, on the models the workers trained; its step must not depend on
which rank trained what. SEAFL with Adam on the delta form (which also fetches each job's base version)."""
import json

import pytest

from launching import run_torchrun
from resuming import reference
from small_runs import SMALL

pytestmark = pytest.mark.dist

ADAM = [*SMALL, "algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01",
        "algorithm.server_opt.pseudo_gradient=delta"]


def test_three_ranks_equal_one_process_with_adam(tmp_path):
    ref = reference(tmp_path / "w1", ADAM)
    proc = run_torchrun(3, *ADAM, "--out", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 3 ranks (gloo)" in proc.stderr
    got = tmp_path / "run"
    for name in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    assert s_got == s_ref and s_got["status"] == "completed"
    assert "server_opt:\n    name: adam" in (got / "config.yaml").read_text()
