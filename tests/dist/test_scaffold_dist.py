"""SCAFFOLD's c_k on the workers (the controls part of the device state, runtime/residuals.py) across a kill.

W = 3, rank 0 SIGKILLed during aggregation 3 (checkpoints every 2, no restart): checkpoint 2 names each worker's
file, whose ``controls`` part holds the c_k of that worker's devices only (device k on worker 1 + k mod 2) and,
device for device, the c_k a one-process run checkpoints at 2; the dir then resumes under W = 3 to the
uninterrupted one-process run's bytes. Under torchrun another placement is refused in one line, by every rank
before anything starts.
"""
import pytest
import torch

from launching import run_torchrun
from resuming import assert_same_run, checkpoint_path, checkpoint_versions, killed_during_3, reference
from seafl_dist.runtime.distributed import run_distributed
from seafl_dist.runtime.rundir import private_dir
from seafl_dist.settings import ConfigError, config_from_dict
from small_runs import SCAFFOLD, SMALL

pytestmark = pytest.mark.dist

RUN = [*SMALL, *SCAFFOLD, "runtime.placement=device", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("scaffold") / "ref", RUN)


def test_a_killed_three_rank_run_keeps_each_workers_c_k_and_resumes_to_the_same_bytes(ref, tmp_path):
    out = tmp_path / "run"
    proc = run_torchrun(3, *RUN, "--out", out, cwd=tmp_path, fault="during_aggregate:3")
    assert proc.returncode != 0 and checkpoint_versions(out) == [2], proc.stderr[-3000:]
    state = torch.load(checkpoint_path(out, 2), weights_only=True)
    assert "controls" not in state and sorted(state["residuals"]) == ["residuals-00000002-rank1.pt",
                                                                      "residuals-00000002-rank2.pt"]
    parts = {r: torch.load(private_dir(out) / f"residuals-00000002-rank{r}.pt", weights_only=True)["controls"]
             for r in (1, 2)}
    for r, part in parts.items():
        assert all(1 + d % 2 == r for d in part["c"]), (r, sorted(part["c"]))
    inline = killed_during_3(RUN, tmp_path / "one")["controls"]["c"]  # one process, killed at the same point
    merged = {**parts[1]["c"], **parts[2]["c"]}
    assert sorted(merged) == sorted(inline) and len(inline) >= 2
    assert all(torch.equal(merged[d], inline[d]) for d in inline)
    again = run_torchrun(3, *RUN, "--out", out, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed {out} after aggregation 2" in again.stderr
    assert_same_run(ref, out)


def test_another_placement_under_torchrun_is_refused_in_one_line_before_anything_starts(tmp_path):
    """Every rank's run_distributed refuses it first: no process group is touched (store=None), nothing is written."""
    cfg = config_from_dict({}, [*SMALL, *SCAFFOLD])
    with pytest.raises(ConfigError) as err:
        run_distributed(cfg, tmp_path / "run", rank=0, world_size=2, local_rank=0, store=None, pg_timeout_s=1.0)
    line = ("config key 'runtime.placement' has value 'balanced'; allowed: device with algorithm.name=scaffold "
            "under torchrun")
    assert str(err.value).startswith(line) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()
