"""The run dir's server-private part and ``seafl release`` (issue 60 B, finding 3), in this process.

- A run stopped by SIGTERM keeps its checkpoints in ``private/``, none at the top, and says so in one stderr line
  that names the folder and ``seafl release``; a completed run leaves no ``private/`` and prints no such line.
- A run dir written before the move (checkpoints at its top level) resumes, writes its next checkpoint into
  ``private/`` (pruning the old ones as they age), and ends with the uninterrupted run's bytes.
- ``seafl release`` copies only the released files, with their times normalised, and refuses in one line a DP
  run with ``privacy.diagnostics``, an unfinished run without ``--partial``, a tampered run and a non-empty OUT.
"""
import os
import shutil

import pytest

import in_process
from one_line import one_error_line, one_line
from resuming import (QUICKSTART, assert_same_run, checkpoint_path, checkpoint_versions, dir_bytes,
                      reference, summary)
from seafl_dist.runtime.release import RELEASE_TIME, ReleaseError, check
from seafl_dist.runtime.rundir import PROVEN, private_dir
from small_runs import DP_KEY, SMALL

ARGS = [*SMALL, *DP_KEY, "algorithm.name=fedbuff", "privacy.enabled=true", "privacy.noise_multiplier=0.8",
        "privacy.clipping_bound=2", "run.checkpoint_every=2", "run.checkpoint_every_s=null"]
NOTE = "holds server-private files in "


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """The uninterrupted run and what it printed."""
    out = tmp_path_factory.mktemp("release") / "done"
    proc = in_process.seafl("run", QUICKSTART, *ARGS, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert NOTE not in proc.stderr and not private_dir(out).exists()
    return out


def stopped_run(out, at: int, *argv):
    """``seafl run ARGV`` in this process, stopped by SIGTERM after aggregation ``at`` (the SEAFL_FAULT hook)."""
    os.environ["SEAFL_FAULT"] = f"after_aggregate:{at}:TERM"
    try:
        proc = in_process.seafl(*(argv or ("run", QUICKSTART, *ARGS, "--out", out)))
    finally:
        del os.environ["SEAFL_FAULT"]
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert summary(out)["status"] == "interrupted"
    return proc


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run stopped by SIGTERM after aggregation 3 (checkpoints of 2, and of 3 on the way out) and its stderr."""
    out = tmp_path_factory.mktemp("release") / "stopped"
    return out, stopped_run(out, 3).stderr


def test_a_sigterm_keeps_the_checkpoints_in_private_and_says_so_in_one_line(interrupted):
    out, err = interrupted
    assert checkpoint_versions(out) == [2, 3] and checkpoint_path(out, 3).is_file()
    notes = [line for line in err.splitlines() if NOTE in line]
    assert notes == [f"seafl: {out} {NOTE}{out / 'private'} (checkpoints, devices' residuals, the noise key: never "
                     f"publish them); to publish this run, copy only what is released: seafl release {out} OUT"]


def test_a_run_dir_written_before_the_move_resumes_into_private_to_the_same_bytes(done, interrupted, tmp_path):
    old = shutil.copytree(interrupted[0], tmp_path / "old")
    for p in private_dir(old).glob("checkpoint-*"):  # as a seafl before the move left it (a key, if any, stays)
        p.rename(old / p.name)
    if not any(private_dir(old).iterdir()):
        private_dir(old).rmdir()
    assert (old / "checkpoint-00000003.pt").is_file() and not checkpoint_path(old, 3).exists()
    err = stopped_run(old, 4, "run", "--resume", old).stderr
    assert f"resumed {old} after aggregation 3" in err
    assert checkpoint_path(old, 4).is_file() and not list(private_dir(old).glob("checkpoint-0000000[23].pt"))
    assert (old / "checkpoint-00000003.pt").is_file(), "the last two are kept, counting the old ones"
    assert not (old / "checkpoint-00000002.pt").exists(), "an old checkpoint is pruned as new ones come"
    assert [line for line in err.splitlines() if NOTE in line] == [line for line in err.splitlines() if
                                                                   f"{NOTE}{old / 'private'}" in line] != []
    proc = in_process.seafl("run", "--resume", old)
    assert proc.returncode == 0 and f"resumed {old} after aggregation 4" in proc.stderr, proc.stderr[-3000:]
    assert_same_run(done, old)
    assert NOTE not in proc.stderr and not list(old.glob("checkpoint-*"))


def test_release_copies_only_the_released_files_with_their_times_normalised(done, tmp_path):
    run = shutil.copytree(done, tmp_path / "run")
    private_dir(run).mkdir()
    extra = {"private/noise.key": b"k" * 32, "private/checkpoint-00000004.pt": b"c", "checkpoint-00000002.pt": b"c",
             "residuals-00000002-rank1.pt": b"r", "model.pt.tmp": b"t", "notes.md": b"n",
             "wandb/run-1/run-1.wandb": b"w", "wandb_run.json": b'{"id": "x"}', "wandb_sync.txt": b"wandb sync"}
    for name, data in extra.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    proc = in_process.seafl("release", run, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    got = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*"))
    written = sorted(p.name for p in done.iterdir())  # the run's own files: PROVEN's it wrote and summary.json
    assert set(written) <= {*PROVEN, "summary.json"} and "model.pt" in written
    assert got == sorted([*written, "wandb_run.json", "wandb_sync.txt"])
    for name in got:
        assert (tmp_path / "out" / name).read_bytes() == (run / name).read_bytes()
        assert (tmp_path / "out" / name).stat().st_mtime == RELEASE_TIME == 946684800  # 2000-01-01T00:00:00Z
    assert (tmp_path / "out").stat().st_mtime == RELEASE_TIME
    one_line(proc.stderr, f"released {len(got)} files of {run}")
    again = in_process.seafl("release", run, tmp_path / "out")
    assert again.returncode == 2
    one_error_line(again.stderr, f"OUT {tmp_path / 'out'} exists and is not empty")


def refusal(tmp_path, *argv, code=2) -> str:
    """``seafl ARGV`` exits ``code`` with one error line and writes no OUT (``tmp_path / "out"``)."""
    proc = in_process.seafl(*argv)
    assert proc.returncode == code, proc.stderr
    assert not (tmp_path / "out").exists()
    return one_error_line(proc.stderr)


def test_release_refuses_diagnostics_an_unfinished_run_and_a_tampered_one_in_one_line(done, interrupted, tmp_path):
    diag = shutil.copytree(done, tmp_path / "diag")
    text = (diag / "config.yaml").read_text()
    assert "\n  diagnostics: false\n" in text
    (diag / "config.yaml").write_text(text.replace("\n  diagnostics: false\n", "\n  diagnostics: true\n"))
    err = refusal(tmp_path, "release", diag, tmp_path / "out")
    assert f"run dir {diag} was run with privacy.diagnostics=true: it holds values outside the guarantee" in err
    stopped = interrupted[0]
    err = refusal(tmp_path, "release", stopped, tmp_path / "out")
    assert "holds an unfinished run (summary.json says 'interrupted')" in err and "--partial" in err
    before = dir_bytes(stopped)
    proc = in_process.seafl("release", stopped, tmp_path / "partial", "--partial")
    assert proc.returncode == 0 and "is a partial release" in proc.stderr, proc.stderr
    assert sorted(p.name for p in (tmp_path / "partial").iterdir()) == sorted(
        n for n in before if n in (*PROVEN, "summary.json"))
    assert dir_bytes(stopped) == before and checkpoint_versions(stopped) == [2, 3]
    tampered = shutil.copytree(done, tmp_path / "tampered")
    (tampered / "metrics.csv").write_text((tampered / "metrics.csv").read_text().replace(",", ";", 1))
    err = refusal(tmp_path, "release", tampered, tmp_path / "out")
    assert "metrics.csv is not the file the run wrote" in err
    err = refusal(tmp_path, "release", done, tmp_path / "out", "--device", "3")
    assert "--device 3 is given without --check" in err


def test_check_compares_only_dp_runs_and_a_run_with_itself_has_no_difference(done, tmp_path, capsys):
    assert check(done, done) == 0
    assert "0 differences (no evaluation differs), 0 outside" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.yaml").write_text("name: plain\n")
    with pytest.raises(ReleaseError, match=r"^--check compares two neighbouring runs under DP, and run dir .*plain "
                                           r"has privacy.enabled false"):
        check(plain, done)
    with pytest.raises(ReleaseError, match="no aggregation of .* includes device 99"):
        check(done, done, device=99)
