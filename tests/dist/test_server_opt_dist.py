"""A server optimizer under torchrun: W = 3 gives the run dir of one process (issue 40).

The optimizer runs on rank 0 after the rule, on the models the workers trained; its step must not depend on
which rank trained what. SEAFL with Adam on the delta form (which also fetches each job's base version)."""
import pytest

from launching import in_process_and_on_ranks, same_summary
from small_runs import SMALL

pytestmark = pytest.mark.dist

ADAM = [*SMALL, "algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01",
        "algorithm.server_opt.pseudo_gradient=delta"]


def test_three_ranks_equal_one_process_with_adam(tmp_path):
    ref, got = in_process_and_on_ranks(3, ADAM, tmp_path)
    for name in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    assert same_summary(ref, got)["status"] == "completed"
    assert "server_opt:\n    name: adam" in (got / "config.yaml").read_text()
