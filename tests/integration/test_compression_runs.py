"""Runs with compressed uploads (issue 41) end to end in one process: every codec's trace checks out with the
shorter uploads, error feedback changes what is learnt, and a run with error feedback killed in the middle resumes
byte-identical (the residuals are in the checkpoint)."""
import signal

import pytest
import torch

from resuming import assert_same_run, checkpoint_path, checkpoint_versions, cli, reference, refused, run_args
from seafl_dist.cli import main as seafl_main
from seafl_dist.report.trace import check_run
from small_runs import QUICKSTART, SMALL

EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]
FEEDBACK = ["compression.codec=topk", "compression.fraction=0.05", "compression.error_feedback=true",
            "runtime.placement=device", "clock.upload_s=5"]


@pytest.mark.parametrize("codec", ["bf16", "int8", "qsgd", "topk"])
def test_each_codec_runs_and_its_trace_checks_out(codec, tmp_path):
    out = reference(tmp_path / codec, [*SMALL, f"compression.codec={codec}", "clock.upload_s=5"])
    assert check_run(out) == []
    assert "compression" in (out / "config.yaml").read_text()


@pytest.mark.parametrize("path", [["train.loop=lightning"], ["runtime.batch_jobs=3"]], ids=["lightning", "fused"])
def test_every_training_path_uploads_through_the_codec(path, tmp_path):
    """The Lightning loop and fused groups hand their models to the same place (GroupTrainer.train): the same
    schedule as the plain loop's compressed run, other models than without the codec."""
    plain = reference(tmp_path / "plain", [*SMALL, "compression.codec=qsgd", "clock.upload_s=5"])
    other = reference(tmp_path / "other", [*SMALL, "compression.codec=qsgd", "clock.upload_s=5", *path])
    full = reference(tmp_path / "full", [*SMALL, "clock.upload_s=5", *path])
    assert check_run(other) == []
    lines = [(d / "events.jsonl").read_text().splitlines() for d in (plain, other)]
    assert [x for x in lines[0] if '"finish"' in x] == [x for x in lines[1] if '"finish"' in x]
    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (other, full))
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_dry_run_says_what_an_upload_costs(capsys, tmp_path):
    assert seafl_main(["run", str(QUICKSTART), "--dry-run", "compression.codec=int8", "--out", str(tmp_path / "r")]) == 0
    assert "uploads int8: 61,746 of the model's 246,824 bytes (0.2502)" in capsys.readouterr().out


def test_error_feedback_changes_what_is_learnt(tmp_path):
    plain = reference(tmp_path / "plain", [*SMALL, *FEEDBACK[:2], "runtime.placement=device", "clock.upload_s=5"])
    fed = reference(tmp_path / "fed", [*SMALL, *FEEDBACK])
    assert [line for line in (plain / "events.jsonl").read_text().splitlines() if '"eval"' not in line and
            '"aggregate"' not in line] == [line for line in (fed / "events.jsonl").read_text().splitlines()
                                            if '"eval"' not in line and '"aggregate"' not in line]  # same schedule
    a = torch.load(plain / "model.pt", weights_only=True)
    b = torch.load(fed / "model.pt", weights_only=True)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_killed_run_with_error_feedback_resumes_to_the_same_bytes(tmp_path):
    overrides = [*SMALL, *FEEDBACK, *EVERY_2]
    ref = reference(tmp_path / "ref", overrides)
    out = tmp_path / "run"
    stopped = cli(*run_args(overrides, out), fault="during_aggregate:3")
    assert stopped.returncode == -signal.SIGKILL and checkpoint_versions(out) == [2]
    state = torch.load(checkpoint_path(out, 2), weights_only=True)
    assert state["feedback"] and all(r.shape == (61706,) for r in state["feedback"].values())
    # torchrun may resume it too: its workers read their devices' residuals from it (runtime/residuals.py)
    from seafl_dist.runtime.launch import Target, _plan_for_all
    from seafl_dist.runtime.residuals import gather
    from seafl_dist.settings import load_config
    plan, err = _plan_for_all(load_config(QUICKSTART, overrides), out, Target(), False)
    assert plan["action"] == "resume" and err is None
    mine = gather(checkpoint_path(out, 2), [d for d in range(10) if d % 2 == 0])  # worker 1 of W = 3
    assert mine and sorted(mine) == sorted(d for d in state["feedback"] if d % 2 == 0)
    assert all(torch.equal(mine[d], state["feedback"][d]) for d in mine)
    resumed = cli(*run_args(overrides, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {out} after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)


def test_a_checkpoint_without_residuals_is_refused_in_one_line(tmp_path):
    overrides = [*SMALL, *FEEDBACK, *EVERY_2]
    out = tmp_path / "run"
    assert cli(*run_args(overrides, out), fault="after_aggregate:2").returncode == -signal.SIGKILL
    path = checkpoint_path(out, 2)
    state = torch.load(path, weights_only=True)
    del state["feedback"]  # as a torchrun run writes it: its residuals stayed on the workers
    torch.save(state, path)
    line = refused(["run", QUICKSTART, *overrides, "--out", out], out)
    assert "compression.error_feedback cannot resume byte-identically without its devices' residuals" in line


def test_a_run_whose_residual_checkpoints_do_not_fit_on_the_disk_is_refused_before_anything_is_written(
        tmp_path, capsys):
    from tmpfs import tmpfs
    # 10 LeNet-5 devices: 3 checkpoints (two kept, one being written) x 10 x 61,706 x 4 bytes = 7.4 MB > 4 MB
    with tmpfs(tmp_path / "disk", "size=4m") as disk:
        assert seafl_main(["run", str(QUICKSTART), *SMALL, *FEEDBACK, "--out", str(disk / "run")]) == 2
        assert list(disk.iterdir()) == [], "nothing may be written"
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after "seafl: running ...", as the memory refusal
    assert line == (f"seafl: error: config key 'compression.error_feedback' has value True: the residual checkpoints "
                    f"of 10 devices (0.2 MB a device; 2 kept and one being written) take 7.4 MB, more than the 4.2 MB "
                    f"free for {disk / 'run'}; free disk, use another --out, fewer devices, or turn error feedback off")
