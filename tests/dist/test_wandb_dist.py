"""Under torchrun, rank 0's W&B run follows a kill and a rerun of the same command: the same run
id, each version once across the offline files (W&B's offline mode ignores ``resume``)."""
import json
import subprocess

import pytest

from launching import clean_env, torchrun_cmd
from small_runs import SMALL
from wandb_runs import logged_versions, offline_env

pytest.importorskip("wandb.proto.wandb_internal_pb2")
pytestmark = pytest.mark.dist

WB = [*SMALL, "run.checkpoint_every=2", "logging.wandb.enabled=true", "logging.wandb.mode=offline", "--out", "run"]


def test_torchrun_killed_and_rerun_continues_the_wandb_run(tmp_path):
    from seafl_dist.report.wandb_files import offline_files

    killed = subprocess.run(torchrun_cmd(2, *WB), cwd=tmp_path, capture_output=True, text=True, timeout=240,
                            env=offline_env(tmp_path, clean_env(), fault="during_aggregate:3"))
    out = tmp_path / "run"
    assert killed.returncode != 0 and not (out / "summary.json").exists(), killed.stderr[-3000:]
    run_id = json.loads((out / "wandb_run.json").read_text())["id"]

    rerun = subprocess.run(torchrun_cmd(2, *WB), cwd=tmp_path, capture_output=True, text=True, timeout=240,
                           env=offline_env(tmp_path, clean_env()))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed run after aggregation 2" in rerun.stderr
    assert json.loads((out / "wandb_run.json").read_text())["id"] == run_id
    files = offline_files(out / "wandb", run_id)
    assert len(files) == 2 and logged_versions(files) == [0, 1, 2, 3, 4, 5, 6]
