"""A run dir belongs to one config and one writer (issue 16, point 1), through the CLI and the API.

The issue's scenario: config A completes into a dir; config B is run into the same dir and
SIGKILLed after aggregation 3; B's command again. Before, that printed "already holds a completed
run of this config" and kept A's summary.json and model.pt beside B's events. Now B is refused
(exit 2, one line naming the keys, every byte kept) until ``--overwrite``, which deletes A's files
first; the killed B then resumes (a requeued job repeats the same command, --overwrite included)
and ends byte-identical to an uninterrupted B, never reporting A's results.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

import seafl_dist
from resuming import (SAME_BYTES, assert_same_run, checkpoint_versions, cli, dir_bytes, reference, refused,
                      run_args, summary)
from seafl_dist.cli import main as seafl_main
from seafl_dist.runtime.runlock import NAME
from seafl_dist.settings import ConfigError
from seafl_dist.settings.core import parse_override
from small_runs import QUICKSTART, ROOT, SMALL
from tmpfs import tmpfs

A = [*SMALL, "algorithm.name=fedbuff", "run.max_aggregations=4"]
B = [*SMALL, "run.checkpoint_every=1", "run.checkpoint_every_s=null"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(A completed, B uninterrupted, a dir where A completed and B then ran with --overwrite and was killed)."""
    base = tmp_path_factory.mktemp("reuse")
    done_a, ref_b = reference(base / "a", A), reference(base / "b", B)
    shared = base / "shared"
    shutil.copytree(done_a, shared)
    killed = cli(*run_args(B, shared), "--overwrite", fault="after_aggregate:3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    return done_a, ref_b, shared


@pytest.fixture
def killed(runs, tmp_path):
    shutil.copytree(runs[2], tmp_path / "run")
    return tmp_path / "run"


def test_a_completed_run_of_another_config_is_refused_naming_the_keys(runs, tmp_path):
    done_a = tmp_path / "a"
    shutil.copytree(runs[0], done_a)
    err = refused(run_args(B, done_a), done_a)
    assert err.startswith(f"seafl: error: run dir {done_a} holds a completed run of another config: ")
    assert "algorithm.name ('fedbuff' there, 'seafl' now)" in err and "--overwrite" in err


def test_overwrite_deletes_the_other_runs_files_before_anything_is_written(runs):
    shared = runs[2]
    assert not (shared / "summary.json").exists() and not (shared / "model.pt").exists(), "A's results survived"
    assert checkpoint_versions(shared) == [2, 3]
    assert "fedbuff" not in (shared / "config.yaml").read_text()
    assert '"aggregations"' not in (shared / "events.jsonl").read_text()


def test_the_killed_run_resumes_with_the_same_command_and_never_reports_the_other(capsys, runs, killed):
    done_a, ref_b, _ = runs
    for temp in ("private/checkpoint-00000004.pt.tmp", "model.pt.tmp"):  # as a kill during a write leaves them
        (killed / temp).write_bytes(b"\0" * 1000)
    err = refused(run_args(A, killed), killed)  # A into B's unfinished run: refused too
    assert "is of another config" in err and "algorithm.name ('seafl' there, 'fedbuff' now)" in err
    assert seafl_main([*map(str, run_args(B, killed)), "--overwrite"]) == 0  # a requeue repeats the command
    assert f"resumed {killed} after aggregation 3" in capsys.readouterr().err
    assert_same_run(ref_b, killed)
    assert not list(killed.glob("*.tmp")) and not list(killed.glob("private/*")) and not (killed / NAME).exists()
    s = summary(killed)
    assert s["algorithm"] == "seafl" and s["aggregations"] == 6 and s != summary(done_a)
    assert refused(run_args(B, killed), killed, code=0).endswith("nothing to do")


@pytest.mark.parametrize("override", ["runtime.precision=bf16", "runtime.batch_jobs=2", "runtime.deterministic=true"])
def test_resume_refuses_keys_that_change_the_trained_bits(killed, override):
    err = refused(["run", "--resume", str(killed), override], killed)
    assert "another config" in err and override.split("=")[0] + " (" in err


def test_a_dir_held_by_a_live_run_is_refused_and_taken_over_once_it_is_gone(capsys, runs, killed):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom seafl_dist.runtime.runlock import "
                               "RunDirLock\nRunDirLock(sys.argv[1]).acquire()\nprint('held', flush=True)\n"
                               "time.sleep(300)", str(killed)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        err = refused(["run", "--resume", str(killed)], killed)
        assert f"run dir {killed} is in use by another run: host " in err and f"pid {holder.pid} " in err
        assert "heartbeat 0s ago" in err or "heartbeat 1s ago" in err
    finally:
        holder.kill()  # as an orphan killed at last: its lock stays behind, stale
        holder.wait()
    assert json.loads((killed / NAME).read_text())["pid"] == holder.pid
    assert seafl_main(["run", "--resume", str(killed)]) == 0
    err = capsys.readouterr().err
    assert f"taking over the lock of {killed} from host" in err and f"process {holder.pid} on" in err
    assert_same_run(runs[1], killed)


def api_kwargs(overrides):
    return dict(parse_override(o) for o in overrides)


def test_the_python_api_refuses_and_overwrites_alike(runs, tmp_path):
    done_a = tmp_path / "a"
    shutil.copytree(runs[0], done_a)
    before = dir_bytes(done_a)
    with pytest.raises(ConfigError, match="holds a completed run of another config: algorithm.name"):
        seafl_dist.run(str(QUICKSTART), out=done_a, **api_kwargs(B))
    assert dir_bytes(done_a) == before
    assert seafl_dist.run(str(QUICKSTART), out=done_a, **api_kwargs(A)) == summary(runs[0])  # completed: as it is
    got = seafl_dist.run(str(QUICKSTART), out=done_a, overwrite=True, **api_kwargs(B))
    assert got["algorithm"] == "seafl" and got == summary(done_a)
    assert_same_run(runs[1], done_a)


def test_an_out_that_is_a_file_is_one_line_before_anything_trains(tmp_path):
    (tmp_path / "f").write_text("mine")
    err = refused(run_args(B, tmp_path / "f"), tmp_path)
    assert f"--out {tmp_path / 'f'} is an existing file, not a directory" in err
    err = refused(run_args(B, tmp_path / "f" / "run"), tmp_path)
    assert "is a file, so the run dir cannot be created under it" in err
    with pytest.raises(ConfigError, match="is an existing file"):
        seafl_dist.run(str(QUICKSTART), out=tmp_path / "f", **api_kwargs(B))
    assert (tmp_path / "f").read_text() == "mine"


def test_an_out_that_cannot_be_written_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        err = refused(run_args(B, ro / "run"), ro)
        assert f"--out {ro / 'run'}: {ro} is on a read-only file system" in err
        with pytest.raises(ConfigError, match="read-only file system"):
            seafl_dist.run(str(QUICKSTART), out=ro / "run", **api_kwargs(B))


def test_a_sweep_reruns_a_changed_run_from_scratch_in_a_cleared_dir(runs, tmp_path):
    out, name = tmp_path / "sweep", "one"
    first = cli("sweep", QUICKSTART, *B, "--seeds", "0", "train.lr=0.1", "--out", out, "--name", name,
                fault="after_aggregate:3")
    assert first.returncode == 1 and "FAILED" in first.stderr, first.stderr[-2000:]
    (run,) = [d for d in out.iterdir() if d.is_dir() and d.name != "configs"]
    assert checkpoint_versions(run) == [2, 3] and "lr: 0.1" in (run / "config.yaml").read_text()
    again = cli("sweep", QUICKSTART, *B, "--seeds", "0", "--out", out, "--name", name)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"rerun {run.name}: its config changed (train.lr); its old files are deleted" in again.stderr
    log = (run / "log.txt").read_text()
    assert "resumed" not in log and log.count("$ ") == 1, "the old run's log was kept"
    for name in SAME_BYTES:  # the sweep names its run itself, so only these equal the plain run's
        assert (run / name).read_bytes() == (runs[1] / name).read_bytes(), name
    assert summary(run)["status"] == "completed" and not checkpoint_versions(run)
