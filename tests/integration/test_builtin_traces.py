"""The built-in models' traces keep their bytes: today's code against the reference commit of today's
numerics version (BEFORE_BY_NUMERICS: for version 1 the code before the LightningModule contract, for
version 2 the commit that made the built-in models train channels-last on a CPU), run here, side by side.

That package is taken from this clone's git history (``git archive``, tests/old_code.py) and run
with the same configs on this machine, so the comparison does not depend on the CPU the bits were
made on. events.jsonl, metrics.csv and model.pt must be byte-identical, and config.yaml too (the new
keys are left out at their defaults), for one job at a time (LeNet-5, and ResNet-18 channels-last),
fused jobs and SEAFL²'s partial jobs, and for every other built-in rule: FedBuff (with η_g and staleness
scaling off their defaults), FedAsync and FedAvg, so that a change to what the server does with an aggregate
(a server optimizer, say) cannot move any rule's bytes unseen.
Without that history (a shallow clone) the test cannot make the old files and skips, saying so.
"""
import pytest

from old_code import package_at, run
from resuming import reference
from small_runs import SMALL
from seafl_dist import versions

# per numerics version (seafl_dist/versions.py): a commit whose built-in traces today's code must
# reproduce. A change that bumps NUMERICS adds its own first commit here.
BEFORE_BY_NUMERICS = {1: "6825129", 2: "aced3a1"}
CASES = {
    "one_at_a_time": [],
    "fused": ["runtime.batch_jobs=3", "model.name=resnet18", "model.width=0.125"],
    "batch_norm_channels_last": ["model.name=resnet18", "model.width=0.25"],  # width 0.125 trains NCHW on a CPU
    "partial": ["algorithm.name=seafl2", "train.epochs=2", "algorithm.staleness_limit=1", "run.seed=2"],
    "fedbuff": ["algorithm.name=fedbuff", "algorithm.server_lr=0.7", "algorithm.staleness_scaling=sqrt"],
    "fedasync": ["algorithm.name=fedasync"],
    "fedavg": ["algorithm.name=fedavg"],
}


@pytest.fixture(scope="module")
def old_package(tmp_path_factory):
    assert versions.NUMERICS in BEFORE_BY_NUMERICS, (
        f"numerics version {versions.NUMERICS} has no reference commit: add its first commit to BEFORE_BY_NUMERICS")
    return package_at(BEFORE_BY_NUMERICS[versions.NUMERICS], tmp_path_factory.mktemp("before"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_built_in_runs_files_are_the_ones_the_code_before_wrote(case, old_package, tmp_path):
    run(old_package, tmp_path / "before", CASES[case])
    reference(tmp_path / "now", [*SMALL, *CASES[case]])  # today's code in this process: no interpreter start
    for name in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "now" / name).read_bytes() == (tmp_path / "before" / name).read_bytes(), name
    assert not (tmp_path / "now" / "train_log.csv").exists()
