"""Bad input for resume (issue 9): one clear line, exit 2 (0 for a completed run), the run dir untouched.

Each case hands ``seafl run`` a run dir it must refuse or leave alone; the CLI's ``main`` runs in
this process (nothing is trained), and the dir's files are compared byte for byte before and after.
"""
import shutil

import pytest

from resuming import QUICKSTART, SMALL, checkpoint_path, checkpoint_versions, cli, reference, refused, run_args
from seafl_dist.settings import load_config
from seafl_dist.runtime import checkpoint

ARGS = [*SMALL, "run.checkpoint_every=2"]
LR = load_config(QUICKSTART).train.lr  # as config.yaml and the refusals write it


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """(a run SIGKILLed right after aggregation 2, with private/checkpoint-00000002.pt; a completed run)."""
    base = tmp_path_factory.mktemp("bad-input")
    proc = cli(*run_args(ARGS, base / "killed"), fault="after_aggregate:2")
    assert proc.returncode != 0 and checkpoint_versions(base / "killed") == [2], proc.stderr[-2000:]
    return base / "killed", reference(base / "done", ARGS)


@pytest.fixture
def killed(dirs, tmp_path):
    shutil.copytree(dirs[0], tmp_path / "run")
    return tmp_path / "run"


def test_resume_of_a_dir_without_checkpoint(killed, tmp_path):
    for p in killed.glob("private/checkpoint-*.pt"):
        p.unlink()
    err = refused(["run", "--resume", str(killed)], killed)
    assert "holds no checkpoint" in err and f"--out {killed}" in err
    (tmp_path / "empty").mkdir()
    assert "holds no config.yaml" in refused(["run", "--resume", str(tmp_path / "empty")], tmp_path / "empty")
    assert "no config.yaml" in refused(["run", "--resume", str(tmp_path / "nowhere")], tmp_path / "nowhere")


def test_a_checkpoint_of_another_config_is_refused_naming_the_keys(killed):
    err = refused(["run", str(QUICKSTART), *ARGS, "train.lr=0.2", "run.seed=5", "--out", str(killed)], killed)
    assert err.startswith("seafl: error: checkpoint") and "another config" in err
    assert f"train.lr ({LR} there, 0.2 now)" in err and "run.seed (0 there, 5 now)" in err
    err = refused(["run", "--resume", str(killed), "algorithm.name=fedbuff"], killed)
    assert "algorithm.name ('seafl' there, 'fedbuff' now)" in err


def test_where_and_how_it_runs_may_change_on_resume(killed):
    cfg = load_config(killed / "config.yaml", ["runtime.threads=2", "run.checkpoint_every=7", "logging.progress=bar"])
    assert checkpoint.plan(cfg, killed, explicit=True) == checkpoint.Plan("resume", checkpoint_path(killed, 2))


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_truncated_or_corrupt_checkpoint_is_refused(killed, damage):
    ck = checkpoint_path(killed, 2)
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 2] if damage == "truncated" else data[:100] + b"\0" * 64 + data[164:])
    err = refused(["run", "--resume", str(killed)], killed)
    assert f"checkpoint {ck} is corrupt or truncated" in err and "delete it" in err


def test_run_files_shorter_than_the_checkpoint_recorded_are_refused(killed):
    events = killed / "events.jsonl"
    events.write_bytes(events.read_bytes()[:200])
    assert "shorter than the" in refused(["run", "--resume", str(killed)], killed)


def test_resume_and_out_naming_different_dirs(killed, tmp_path):
    err = refused(["run", "--resume", str(killed), "--out", str(tmp_path / "other")], killed)
    assert "name different run dirs" in err and not (tmp_path / "other").exists()


def test_a_completed_run_is_left_alone_with_exit_0(capsys, dirs):
    done = dirs[1]
    assert "already holds a completed run" in refused(["run", "--resume", str(done)], done, code=0)
    assert "already holds a completed run" in refused(["run", str(QUICKSTART), *ARGS, "--out", str(done)], done, code=0)
    assert (done / "model.pt").exists() and not checkpoint_versions(done)


@pytest.mark.parametrize("edit, fragments", [
    ((f"lr: {LR}", "lr: -1"), ["config.yaml: config key 'train.lr' has value -1.0; allowed: a finite number > 0"]),
    ((f"lr: {LR}", f"lrr: {LR}"), ["config.yaml: config key 'train.lrr'", "did you mean 'train.lr'?"]),
    ((f"lr: {LR}", f"lr: [{LR}"), ["config.yaml' is not valid YAML: line ", "expected ',' or ']'"]),
    ((f"lr: {LR}", "lr: 0.1"), ["config.yaml was edited after the run's last checkpoint was written: "
                                f"train.lr ({LR} there, 0.1 now) (there: checkpoint-00000002.pt)", "put it back"]),
])
def test_resuming_a_run_dir_whose_config_yaml_was_edited_names_the_file_and_what_is_wrong(killed, edit,
                                                                                          fragments):
    own = killed / "config.yaml"
    assert edit[0] in own.read_text()
    own.write_text(own.read_text().replace(edit[0], edit[1]))
    err = refused(["run", "--resume", str(killed)], killed)
    assert err.startswith(f"seafl: error: cannot resume {killed}: ") and str(own) in err, err
    assert all(f in err for f in fragments), err
    assert refused(["run", "--resume", str(killed), "--dry-run"], killed) == err
