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
import json
import os
import subprocess
import sys

import pytest

from old_code import package_at
from resuming import reference
from small_runs import QUICKSTART, SMALL
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


# the old package's runs, one after another in one process of it (one interpreter start, not one a case): each
# as tests/resuming.py's reference() runs today's code, its exit code (or what it raised) into a JSON file
DRIVER = """\
import json, sys
import torch
from seafl_dist.cli import main
from seafl_dist.data import clear_cache
runs, codes = json.loads(sys.argv[1]), {}
for case, argv in runs.items():
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            codes[case] = main(argv)
    except BaseException as err:
        codes[case] = repr(err)
    finally:
        torch.set_num_threads(threads)
        clear_cache()
with open(sys.argv[2], "w") as f:
    json.dump(codes, f)
"""


@pytest.fixture(scope="module")
def before(old_package, tmp_path_factory, request):
    """{case: (its run dir by the old code, its exit code), the old process's stderr} for the cases this session
    runs, all made by one process of the old package (one torch thread, PYTHONPATH the old package)."""
    where = tmp_path_factory.mktemp("old-runs")
    chosen = sorted({item.callspec.params["case"] for item in request.session.items
                     if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params})
    runs = {case: ["run", str(QUICKSTART), *SMALL, *CASES[case], "--out", str(where / case)] for case in chosen}
    env = {k: v for k, v in os.environ.items() if k != "SEAFL_FAULT"}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(old_package)
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(runs), str(where / "codes.json")], cwd=where,
                          env=env, capture_output=True, text=True, timeout=300 * len(runs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads((where / "codes.json").read_text())
    return {case: (where / case, codes[case]) for case in chosen}, proc.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_built_in_runs_files_are_the_ones_the_code_before_wrote(case, before, tmp_path):
    (old, code), stderr = before[0][case], before[1]
    assert code == 0, stderr[-3000:]
    reference(tmp_path / "now", [*SMALL, *CASES[case]])  # today's code in this process: no interpreter start
    for name in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "now" / name).read_bytes() == (old / name).read_bytes(), name
    assert not (tmp_path / "now" / "train_log.csv").exists()
