"""docs/extending.md's autoencoder, evaluated by its own test_step with run.target_metric=test_loss, under
torchrun W = 3: the run dir is the one process's byte for byte (rank 0 evaluates; the workers, which hold
no test set, train it), and its summary's times to target are the same."""
import json
import os
import subprocess

import pytest

from docs_checks import page_modules
from docs_pages import ROOT, read_page
from launching import clean_env, torchrun_cmd
from resuming import reference
from small_runs import SMALL

pytestmark = pytest.mark.dist
ARGS = [*SMALL, "model.name=digits_autoencoder:autoencoder", "run.target_metric=test_loss", "run.target_mode=min",
        "run.targets=[0.9,0.8]"]


def test_a_module_evaluated_by_its_own_step_gives_the_one_process_bytes_on_three_ranks(tmp_path):
    (tmp_path / "page").mkdir()
    with page_modules([read_page(ROOT / "docs" / "extending.md")], tmp_path / "page"):
        ref = reference(tmp_path / "w1", ARGS)
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "page")] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(torchrun_cmd(3, *ARGS, "--out", tmp_path / "w3"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("events.jsonl", "metrics.csv", "train_log.csv", "model.pt"):
        assert (tmp_path / "w3" / name).read_bytes() == (ref / name).read_bytes(), name
    s1, s3 = (json.loads((d / "summary.json").read_text()) for d in (ref, tmp_path / "w3"))
    assert s1["time_to_target"] == s3["time_to_target"] and s3["target_metric"] == "test_loss"
