"""``train.dp_sgd`` in whole runs on the bundled digits (SMALL's settings), in this process: the plain loop and
``train.loop: lightning`` each complete under DP-SGD with summary.json's ``dp_sgd`` entry (tests/unit/test_dp_sgd.py
shows the step's bits); a run killed during aggregation 3 resumes from its checkpoint at 2 to the uninterrupted bytes
(the noise is the job's named stream, so a retrained job draws it again); ResNet-18 is refused naming its first
BatchNorm (its fix: tests/dist/test_features_on_ranks.py); ``runtime.batch_jobs`` > 1 trains one job at a time, one
line saying why."""
import pytest

import in_process
from one_line import one_line
from resuming import assert_same_run, killed_during_3, reference, resumed_from_2, summary
from small_runs import QUICKSTART, SMALL

DP = ["train.dp_sgd.enabled=true", "train.dp_sgd.noise_multiplier=0.5", "train.dp_sgd.clip=1.0"]
EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp_sgd")
    return reference(root / "dp", [*SMALL, *DP, *EVERY_2])


def test_a_plain_loop_run_completes_under_dp_sgd_and_says_so(plain):
    s = summary(plain)
    assert s["status"] == "completed" and s["dp_sgd"] == {"clip": 1.0, "noise_multiplier": 0.5, "sampling": "poisson",
                                                          "grad_sample_mode": "hooks", "replaced": []}
    assert (plain / "events.jsonl").read_text().count('"aggregate"') == 6
    assert "dp_sgd" in (plain / "config.yaml").read_text()


def test_a_killed_dp_sgd_run_resumes_to_the_uninterrupted_bytes(plain, tmp_path):
    ref = plain
    out = tmp_path / "killed"
    killed_during_3([*SMALL, *DP, *EVERY_2], out)
    resumed_from_2(ref, [*SMALL, *DP, *EVERY_2], out)
    assert_same_run(ref, out)


def test_the_lightning_loop_runs_under_dp_sgd(tmp_path):
    out = reference(tmp_path / "lightning", [*SMALL, *DP, "train.loop=lightning", "run.max_aggregations=3"])
    assert summary(out)["status"] == "completed" and summary(out)["dp_sgd"]["sampling"] == "poisson"


RESNET = [*SMALL, *DP, "run.max_aggregations=1", "model.name=resnet18", "model.width=0.125"]


def test_batch_norm_is_refused_in_one_line_naming_the_layer(tmp_path):
    """(With train.dp_sgd.fix_modules it trains with GroupNorm: tests/dist/test_features_on_ranks.py, W = 1 and 3.)"""
    proc = in_process.seafl("run", QUICKSTART, *RESNET, "--out", tmp_path / "bn")
    assert proc.returncode == 2 and not (tmp_path / "bn").exists()
    one_line(proc.stderr, "config key 'model.name' has value 'resnet18'", "'stem.1' (BatchNorm2d)",
             "train.dp_sgd.fix_modules: true")


def test_batch_jobs_train_one_job_at_a_time_saying_why(tmp_path):
    proc = in_process.seafl("run", QUICKSTART, *SMALL, *DP, "runtime.batch_jobs=2",
                            "run.max_aggregations=1", "--out", tmp_path / "g2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "runtime.batch_jobs=2" in ln]
    assert len(lines) == 1 and "train.dp_sgd.enabled is true (Poisson batches vary in size" in lines[0]
