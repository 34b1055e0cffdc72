"""A LightningModule with a scheduler, hooks and self.log under torchrun W = 3: the run dir is the one
process's byte for byte (events with each update's logged values, metrics, train_log.csv, model),
with the plain loop and with ``train.loop: lightning`` (a real Trainer on every worker rank)."""
import os
import subprocess
from pathlib import Path

import pytest

from launching import clean_env, torchrun_cmd
from resuming import reference
from small_runs import SMALL

pytestmark = pytest.mark.dist
TESTS = Path(__file__).resolve().parents[1]
FILES = ("events.jsonl", "metrics.csv", "train_log.csv", "model.pt")


@pytest.mark.parametrize("module, loop, first_logged", [
    ("every_hook", "plain", "train_loss"), ("every_hook", "lightning", "train_loss"),
    # torchmetrics values in training and evaluation: computed on each rank's own state (a gather over the
    # run's process group hung the run), reset every epoch and evaluation
    ("metrics_everywhere", "plain", "train_acc"), ("metrics_everywhere", "lightning", "train_acc"),
])
def test_a_logging_module_gives_the_one_process_bytes_on_three_ranks(module, loop, first_logged, tmp_path):
    args = [*SMALL, f"model.name=lightning_modules:{module}", "train.epochs=2", f"train.loop={loop}",
            *(["run.target_metric=test_acc"] if module == "metrics_everywhere" else [])]
    ref = reference(tmp_path / "w1", args)
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(torchrun_cmd(3, *args, "--out", tmp_path / "w3"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on 3 ranks" in proc.stderr
    for name in FILES:
        assert (tmp_path / "w3" / name).read_bytes() == (ref / name).read_bytes(), name
    assert f'"logged": {{"{first_logged}": ' in (ref / "events.jsonl").read_text()
