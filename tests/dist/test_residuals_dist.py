"""Error feedback's residuals in a torchrun run's checkpoints (issue 52; runtime/residuals.py).

Each worker writes its devices' residuals at rank 0's checkpoint version, and rank 0's checkpoint names the files.
One reference (one process, uninterrupted) and these launches (a worker killed and restarted by torchrun, in every
feature's company: tests/dist/test_kill_soak.py):
- W = 3, rank 0 SIGKILLed during aggregation 5, no restart: checkpoints 3 and 4 are kept, each with the files of
  workers 1 and 2 in private/, whose residuals are, device for device, the ones a one-process run checkpoints at 4;
  the dir resumes to the reference's bytes under W = 5, whose workers hold other devices, and (a copy laid out as
  before the move to private/: checkpoints and residual files at the top level) in one process;
- a residual file deleted: torchrun's restarts do not say the refusal again (said once, runtime/elastic.py).
"""
import shutil

import pytest
import torch

from launching import run_torchrun
from resuming import assert_same_run, checkpoint_path, checkpoint_versions, cli, reference, run_args
from seafl_dist.runtime.rundir import private_dir

pytestmark = pytest.mark.dist

RUN = ["devices.num=10", "devices.concurrency=4", "algorithm.buffer_size=2", "train.epochs=1",
       "run.max_aggregations=8", "runtime.threads=1", "runtime.device=cpu", "logging.progress=none",
       "run.checkpoint_every=1", "run.checkpoint_every_s=null", "compression.codec=topk", "compression.fraction=0.05",
       "compression.error_feedback=true", "runtime.placement=device", "clock.upload_s=5"]
LENET = 61706  # LeNet-5's trainable parameters: 4 bytes each a residual


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("residuals") / "ref", RUN)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """W = 3 with rank 0 killed during aggregation 5 (no restart)."""
    base = tmp_path_factory.mktemp("killed")
    proc = run_torchrun(3, *RUN, "--out", base / "run", cwd=base, fault="during_aggregate:5")
    assert proc.returncode != 0
    return base / "run"


def test_each_checkpoint_names_its_workers_files_and_they_hold_one_process_residuals(killed, tmp_path):
    assert checkpoint_versions(killed) == [3, 4]
    # the residual files of the kept checkpoints only (retention: two, as rank 0's)
    assert not list(killed.glob("residuals-*"))
    assert sorted(p.name for p in private_dir(killed).glob("residuals-*")) == [
        "residuals-00000003-rank1.pt", "residuals-00000003-rank2.pt",
        "residuals-00000004-rank1.pt", "residuals-00000004-rank2.pt"]
    state = torch.load(checkpoint_path(killed, 4), weights_only=True)
    assert "feedback" not in state
    files = {r: private_dir(killed) / f"residuals-00000004-rank{r}.pt" for r in (1, 2)}
    assert state["residuals"] == {f.name: f.stat().st_size for f in files.values()}
    parts = {r: torch.load(f, weights_only=True) for r, f in files.items()}
    for r, part in parts.items():  # worker r holds devices d with 1 + d mod 2 == r
        assert part["version"] == 4 and part["rank"] == r and part["residuals"]
        assert all(1 + d % 2 == r for d in part["residuals"]), (r, sorted(part["residuals"]))
    # one process killed after aggregation 5 keeps checkpoint 4 with its residuals inline: the same ones
    one = tmp_path / "one"
    assert cli(*run_args(RUN, one), fault="after_aggregate:5").returncode < 0
    inline = torch.load(checkpoint_path(one, 4), weights_only=True)["feedback"]
    merged = {**parts[1]["residuals"], **parts[2]["residuals"]}
    assert sorted(merged) == sorted(inline) and len(inline) >= 2
    for d in inline:
        assert merged[d].shape == (LENET,) and torch.equal(merged[d], inline[d]), d


def test_a_three_rank_checkpoint_resumes_in_one_process_and_under_five_ranks(ref, killed, tmp_path):
    one, five = tmp_path / "one", tmp_path / "five"
    shutil.copytree(killed, one)
    shutil.copytree(killed, five)
    for p in [*private_dir(one).glob("checkpoint-*"), *private_dir(one).glob("residuals-*")]:
        p.rename(one / p.name)  # a run dir written before the move: the residual files beside their checkpoint
    resumed = cli(*run_args(RUN, one))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {one} after aggregation 4" in resumed.stderr
    assert_same_run(ref, one)
    assert not list(one.glob("residuals-*"))
    proc = run_torchrun(5, *RUN, "--out", five, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed {five} after aggregation 4" in proc.stderr
    assert_same_run(ref, five)


def test_a_refused_resume_is_said_once_not_on_every_restart(killed, tmp_path):
    out = tmp_path / "gone"
    shutil.copytree(killed, out, ignore=shutil.ignore_patterns("residuals-00000004-rank2.pt"))
    missing = private_dir(out) / "residuals-00000004-rank2.pt"
    proc = run_torchrun(3, *RUN, "--out", out, cwd=tmp_path, restarts=3)
    assert proc.returncode != 0
    line = f"residuals {missing} are missing"
    assert proc.stderr.count(line) == 1, proc.stderr[-4000:]
    assert "seafl: running" not in proc.stderr
    assert proc.stderr.count("seafl: error") == 1, proc.stderr[-4000:]  # the later attempts say nothing
