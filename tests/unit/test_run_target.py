"""Which config and run dir ``seafl run`` means (runtime/target.py): CONFIG and --out, or --resume RUN_DIR with
the config kept there; each mistake is one ConfigError, worded exactly. No run, no checkpoint: the edit check
is runtime/checkpoint.py's (tests/integration/test_resume_errors.py runs it on a real checkpoint)."""
from argparse import Namespace
from pathlib import Path

import pytest

from seafl_dist.runtime import checkpoint
from seafl_dist.runtime.target import run_target
from seafl_dist.settings import ConfigError, dump_config, load_config
from small_runs import QUICKSTART


def args(config=None, *overrides, resume=None, out=None):
    return Namespace(config=config, overrides=list(overrides), resume=resume, out=out)


def refused(a) -> str:
    with pytest.raises(ConfigError) as err:
        run_target(a)
    return str(err.value)


@pytest.fixture
def run_dir(tmp_path):
    """A run dir as a run leaves it: its config.yaml (run.seed=3, so it differs from the file's)."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.yaml").write_text(dump_config(load_config(QUICKSTART, ["run.seed=3"])))
    return d


def test_a_config_and_out_name_the_run():
    cfg, out = run_target(args(str(QUICKSTART), "run.seed=5", out="runs/x"))
    assert cfg == load_config(QUICKSTART, ["run.seed=5"]) and out == Path("runs/x")
    assert run_target(args(str(QUICKSTART)))[1] is None  # the launch path picks runs/<name>-<timestamp>
    assert refused(args()) == ("seafl run needs a CONFIG file (e.g. configs/quickstart.yaml) or --resume RUN_DIR")


def test_resume_takes_the_run_dirs_own_config_with_overrides(run_dir, monkeypatch):
    cfg, out = run_target(args(resume=str(run_dir)))
    assert out == run_dir and cfg.run.seed == 3
    # `seafl run --resume D key=value`: argparse takes the first override for CONFIG
    a = args("logging.progress=none", "runtime.threads=1", resume=str(run_dir))
    cfg, out = run_target(a)
    assert (cfg.logging.progress, cfg.runtime.threads, cfg.run.seed, out) == ("none", 1, 3, run_dir)
    assert a.config is None and a.overrides == ["logging.progress=none", "runtime.threads=1"]
    # a CONFIG given with --resume is the config (the same --out resumes by itself too)
    cfg, out = run_target(args(str(QUICKSTART), resume=str(run_dir), out=str(run_dir / ".." / "run")))
    assert cfg.run.seed == 0 and out == run_dir
    assert run_target(args(str(QUICKSTART), "run.seed=7", resume=str(run_dir)))[0].run.seed == 7


def test_resume_refusals_are_one_line_each(run_dir, tmp_path):
    other = tmp_path / "other"
    assert refused(args(resume=str(run_dir), out=str(other))) == (
        f"--resume {run_dir} and --out {other} name different run dirs; give only --resume (or rerun with the same "
        f"--out, which resumes by itself)")
    assert refused(args(resume=str(tmp_path / "empty"))) == (
        f"cannot resume {tmp_path / 'empty'}: it holds no config.yaml, so it is not a seafl run dir")
    (run_dir / "config.yaml").write_text("train: {lr: -1}\n")
    own = run_dir / "config.yaml"
    assert refused(args(resume=str(run_dir))) == (
        f"cannot resume {run_dir}: {own}: config key 'train.lr' has value -1.0; allowed: a finite number > 0")
    own.write_text("train: [\n")  # the YAML error names the file itself: not twice
    message = refused(args(resume=str(run_dir)))
    assert message.startswith(f"cannot resume {run_dir}: config file '{own}' is not valid YAML: ")
    assert message.count(str(own)) == 1


def test_an_edited_config_yaml_is_refused_unless_overrides_are_given(run_dir, monkeypatch):
    seen = []

    def edited(d, cfg):
        seen.append((d, cfg.run.seed))
        return "run.seed (0 there, 3 now) (there: checkpoint-00000002.pt)"

    monkeypatch.setattr(checkpoint, "edited_config", edited)
    own = run_dir / "config.yaml"
    assert refused(args(resume=str(run_dir))) == (
        f"cannot resume {run_dir}: {own} was edited after the run's last checkpoint was written: run.seed (0 there, "
        f"3 now) (there: checkpoint-00000002.pt); put it back as it was to resume (the checkpoint holds the old "
        f"values), or delete {run_dir} to start afresh")
    assert seen == [(run_dir, 3)]
    assert run_target(args("logging.progress=none", resume=str(run_dir)))[0].run.seed == 3  # overrides: not asked
    assert len(seen) == 1
    monkeypatch.setattr(checkpoint, "edited_config", lambda d, cfg: None)
    assert run_target(args(resume=str(run_dir)))[1] == run_dir
