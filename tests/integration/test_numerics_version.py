"""A run dir's bits belong to one numerics version (issue 23, point 4; seafl_dist/versions.py).

summary.json and every checkpoint record the package and numerics versions of the code that
wrote them. Resuming a checkpoint, finding a completed run (``seafl run``, the API) and a sweep's
skip of a completed run are refused in one line (exit 2, the dir untouched) when the numerics
versions differ, in both directions: this code newer (its numerics version 2 against a dir whose
records say seafl 0.1.0, version 1, as the code before channels-last CPU training wrote them; and a
dir really written by that code, from git) and the dir newer (its records say 3). ``--overwrite``
starts the run afresh. A package version alone may change; a dir written before the versions were
recorded reads as numerics version 1. The runs are real (the small quickstart); the killed one is a
``python -m seafl_dist`` process.
"""
import shutil

import pytest
import torch

import seafl_dist
from old_code import package_at
from old_code import run as run_package
from resuming import (SAME_BYTES, SMALL, QUICKSTART, checkpoint_path, checkpoint_versions, cli, dir_bytes, reference, refused,
                      run_args, summary)
from seafl_dist import versions
from seafl_dist.cli import main as seafl_main
from seafl_dist.report.sinks import write_json
from seafl_dist.runtime.rundir import private_dir
from seafl_dist.settings import ConfigError
from seafl_dist.settings.core import parse_override

ARGS = [*SMALL, "run.checkpoint_every=2"]
RECORDS = ("seafl_version", "numerics")
LAST_OF_1 = "ac12a98"  # main just before numerics version 2: the last code of numerics version 1


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """(a run SIGKILLed right after aggregation 4, with checkpoints 2 and 4; the same run completed)."""
    base = tmp_path_factory.mktemp("numerics")
    proc = cli(*run_args(ARGS, base / "killed"), fault="after_aggregate:4")
    assert proc.returncode != 0 and checkpoint_versions(base / "killed") == [2, 4], proc.stderr[-2000:]
    return base / "killed", reference(base / "done", ARGS)


@pytest.fixture
def killed(dirs, tmp_path):
    return shutil.copytree(dirs[0], tmp_path / "killed")


@pytest.fixture
def done(dirs, tmp_path):
    return shutil.copytree(dirs[1], tmp_path / "done")


def rewrite_records(run_dir, **fields):
    """Set (value) or drop (None) ``fields`` in summary.json and every checkpoint of ``run_dir``."""
    def edit(record):
        for k, v in fields.items():
            record.pop(k, None) if v is None else record.__setitem__(k, v)
        return record
    if (run_dir / "summary.json").exists():
        write_json(run_dir / "summary.json", edit(summary(run_dir)))
    for path in private_dir(run_dir).glob("checkpoint-*.pt"):
        torch.save(edit(torch.load(path, weights_only=True)), path)


def same_bits(ref, got) -> None:
    """The trained files byte for byte; the summary equal but for wall time and the versions (checked apart)."""
    for name in SAME_BYTES:
        assert (got / name).read_bytes() == (ref / name).read_bytes(), f"{name} differs from the reference run"
    a, b = summary(ref), summary(got)
    for s in (a, b):
        s.pop("wall_time_s"), s.pop("seafl_version"), s.pop("numerics")
    assert b == a and not checkpoint_versions(got)


CODE_SAYS = "this seafl 0.2.0 trains numerics version 2"  # this code, as it is: no monkeypatch
DIRECTIONS = {  # the dir's records, older or newer than this code's numerics version 2
    "code newer": dict(dir_fields={"seafl_version": "0.1.0", "numerics": 1},
                       dir_says="by seafl 0.1.0 with numerics version 1"),
    "dir newer": dict(dir_fields={"seafl_version": "0.3.0", "numerics": 3},
                      dir_says="by seafl 0.3.0 with numerics version 3"),
}


def other_numerics(run_dir, direction) -> dict:
    """Make ``run_dir``'s records those of ``direction``; its DIRECTIONS entry."""
    d = DIRECTIONS[direction]
    rewrite_records(run_dir, **d["dir_fields"])
    return d


def test_summary_and_every_checkpoint_record_both_versions(dirs):
    killed, done = dirs
    want = {"seafl_version": seafl_dist.__version__, "numerics": seafl_dist.NUMERICS}
    assert {k: summary(done)[k] for k in RECORDS} == want
    for path in private_dir(killed).glob("checkpoint-*.pt"):
        assert {k: torch.load(path, weights_only=True)[k] for k in RECORDS} == want, path.name


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_resume_across_numerics_versions_is_refused_and_overwrite_starts_afresh(capsys, dirs, killed, direction):
    d = other_numerics(killed, direction)
    for argv in (["run", "--resume", killed], run_args(ARGS, killed)):
        err = refused(argv, killed)
        assert err.startswith(f"seafl: error: checkpoint {checkpoint_path(killed, 4)} was trained "
                              f"{d['dir_says']}, and {CODE_SAYS} (other bits); "), err
        assert "--overwrite" in err and "another --out" in err
        assert f"use seafl {d['dir_fields']['seafl_version']} for it" in err
    assert seafl_main([*map(str, run_args(ARGS, killed)), "--overwrite"]) == 0
    assert "resumed" not in capsys.readouterr().err, "a checkpoint of other bits was resumed"
    assert summary(killed)["numerics"] == versions.NUMERICS == 2
    same_bits(dirs[1], killed)  # the bits did not really change: the fresh run is the reference, byte for byte


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_a_completed_run_of_another_numerics_version_is_refused_not_reported(capsys, dirs, done, direction):
    d = other_numerics(done, direction)
    err = refused(run_args(ARGS, done), done)
    assert err.startswith(f"seafl: error: run dir {done} holds a completed run trained {d['dir_says']}, and "
                          f"{CODE_SAYS} (other bits); "), err
    before = dir_bytes(done)
    with pytest.raises(ConfigError, match=f"holds a completed run trained {d['dir_says']}"):
        seafl_dist.run(str(QUICKSTART), out=done, **dict(parse_override(o) for o in ARGS))
    assert dir_bytes(done) == before
    assert seafl_main([*map(str, run_args(ARGS, done)), "--overwrite"]) == 0
    assert "nothing to do" not in capsys.readouterr().err
    assert summary(done)["numerics"] == versions.NUMERICS
    same_bits(dirs[1], done)


def test_a_run_dir_the_code_of_numerics_version_1_wrote_is_refused_and_held_other_bits(dirs, tmp_path):
    """Not records rewritten: the run of the code before the bump (from git), refused by this code in one
    line; run afresh, its trained files are this code's, and not the ones the old code wrote."""
    old = tmp_path / "v1"
    run_package(package_at(LAST_OF_1, tmp_path / "old"), old, ARGS)
    assert {k: summary(old)[k] for k in RECORDS} == {"seafl_version": "0.1.0", "numerics": 1}
    written = dir_bytes(old)
    err = refused(run_args(ARGS, old), old)
    assert err.startswith(f"seafl: error: run dir {old} holds a completed run trained by seafl 0.1.0 with numerics "
                          f"version 1, and {CODE_SAYS} (other bits); use seafl 0.1.0 for it"), err
    assert seafl_main([*map(str, run_args(ARGS, old)), "--overwrite"]) == 0
    same_bits(dirs[1], old)
    for name in SAME_BYTES:  # channels-last training changed every trained file
        assert (old / name).read_bytes() != written[name], f"{name}: numerics version 1 wrote the same bytes"


def test_a_package_version_alone_may_change(capsys, monkeypatch, dirs, killed, done):
    monkeypatch.setattr(versions, "__version__", "0.9.0")
    assert refused(run_args(ARGS, done), done, code=0).endswith("nothing to do")
    assert seafl_main(["run", "--resume", str(killed)]) == 0
    assert f"resumed {killed} after aggregation 4" in capsys.readouterr().err
    assert summary(killed)["seafl_version"] == "0.9.0"
    same_bits(dirs[1], killed)


def test_dirs_written_before_the_versions_were_recorded_are_numerics_version_1(monkeypatch, dirs, killed,
                                                                                done):
    for d in (killed, done):
        rewrite_records(d, seafl_version=None, numerics=None)
    assert "numerics" not in summary(done) and "numerics" not in torch.load(checkpoint_path(killed, 4))
    err = refused(run_args(ARGS, done), done)  # this code as it is, numerics version 2
    assert "trained by a seafl that recorded no version with numerics version 1, and this seafl" in err
    assert "use the seafl that wrote it for it" in err
    assert "recorded no version with numerics version 1" in refused(["run", "--resume", killed], killed)
    monkeypatch.setattr(versions, "NUMERICS", 1)  # code of version 1: they compare equal and resume
    assert refused(run_args(ARGS, done), done, code=0).endswith("nothing to do")
    assert seafl_main(["run", "--resume", str(killed)]) == 0
    same_bits(dirs[1], killed)


def test_a_sweep_refuses_to_skip_a_completed_run_of_another_numerics_version(capsys, monkeypatch, tmp_path):
    out, argv = tmp_path / "sweep", ["sweep", str(QUICKSTART), *ARGS, "--seeds", "0", "--out", str(tmp_path / "sweep"),
                                     "--name", "one", "--jobs", "1"]
    assert seafl_main(argv) == 0, capsys.readouterr().err[-3000:]
    (run,) = [d for d in out.iterdir() if d.is_dir() and d.name != "configs"]
    assert summary(run)["status"] == "completed"
    capsys.readouterr()
    monkeypatch.setattr(versions, "__version__", "0.9.0")  # a package version alone: skipped
    assert seafl_main(argv) == 0 and f"skip  {run.name} (completed)" in capsys.readouterr().err
    rewrite_records(run, seafl_version="0.1.0", numerics=1)  # as the code before the bump wrote it
    err = refused(argv, run)
    assert err == (f"seafl: error: sweep run {run.name}: {run} holds a run (completed) trained by seafl 0.1.0 with "
                   f"numerics version 1, and this seafl 0.9.0 trains numerics version 2 (other bits); use seafl "
                   f"0.1.0 for it, or another --out (or delete {run}) to run it afresh with this one")
