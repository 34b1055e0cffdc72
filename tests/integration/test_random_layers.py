"""A user's model with random layers (Dropout) is reproducible: every job draws from its own
seeded stream (runtime/executor.py job_seeds), so two runs, and a run killed and resumed, end
byte-identical. A model the fused step cannot train exactly (Dropout, BatchNorm with
momentum=None) at runtime.batch_jobs=4 is trained one job at a time, says why in one line, and
ends byte-identical to G = 1. (torchrun W = 3: tests/dist/test_features_on_ranks.py.)"""
import os

import pytest

from resuming import assert_same_run, checkpoint_versions, cli, reference, run_args
from small_runs import SMALL
from user_extensions import LAYERS, write

EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]
FALLBACK = "seafl: runtime.batch_jobs=4: training one job at a time, since the fused step cannot train this model exactly"


@pytest.fixture(scope="module")
def layers(tmp_path_factory):
    """The module name of tests/user_extensions.py's LAYERS, importable here and in child processes."""
    mods = tmp_path_factory.mktemp("mods")
    name = write(mods, LAYERS, prefix="layers")
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(mods))
    mp.setenv("PYTHONPATH", os.pathsep.join([str(mods), *filter(None, [os.environ.get("PYTHONPATH")])]))
    yield name
    mp.undo()


def test_dropout_runs_are_identical_and_resume_to_the_same_bytes(layers, tmp_path):
    args = [*SMALL, f"model.name={layers}:dropout_mlp", *EVERY_2]
    ref = reference(tmp_path / "ref", args)  # in this process
    reference(tmp_path / "again", args)  # again in this process (a fresh process: the killed and resumed ones)
    assert_same_run(ref, tmp_path / "again")

    out = tmp_path / "killed"
    stopped = cli(*run_args(args, out), fault="after_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    resumed = cli(*run_args(args, out))  # retrains the jobs in flight at aggregation 2
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {out} after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)


@pytest.mark.parametrize("builder,why", [
    ("dropout_mlp", "its layer net.3 (Dropout) draws random numbers"),
    ("cumulative_bn_mlp", "its batch norm net.2 has momentum=None"),
])
def test_a_model_the_fused_step_cannot_train_exactly_is_trained_one_job_at_a_time(layers, builder, why, tmp_path,
                                                                                  capsys):
    args = [*SMALL, f"model.name={layers}:{builder}", "train.epochs=2"]
    one = reference(tmp_path / "g1", args)
    assert FALLBACK not in capsys.readouterr().err  # G = 1 has nothing to say
    four = reference(tmp_path / "g4", [*args, "runtime.batch_jobs=4"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "runtime.batch_jobs" in ln]
    assert len(lines) == 1 and lines[0].startswith(FALLBACK) and why in lines[0], lines
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (four / name).read_bytes() == (one / name).read_bytes(), name
