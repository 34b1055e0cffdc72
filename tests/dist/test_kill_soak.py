"""The kill soak at CI's size (issue 52): the newest features together under torchrun W = 2, each case killed twice
(worker rank 1 after aggregation 2, rank 0 during aggregation 4) and restarted by torchrun, ends with its
uninterrupted one-process run's bytes: events.jsonl, metrics.csv, model.pt, device evaluation's files, the
LightningModule's train_log.csv, and summary.json but for wall time (with DP: its ε, δ, z, C and the largest
participation count m, privacy's ledger; with DP-SGD each device's record-level ε, its step ledger's). The cases (tests/soak_cases.py) cover DP with a cap, each codec with error
feedback, each server optimizer, device evaluation, a DataModule split by a key, churn with availability windows,
the Lightning loop and SCAFFOLD's c_k on the workers. One torchrun job runs them all (tests/soak_driver.py): 12 kills,
13 attempts, on W = 2 to
spare CI one interpreter an attempt (tests/dist/test_residuals_dist.py kills W = 3 and resumes it under 5 and 1);
benchmarks/kill_soak.py runs more kills a case, on W = 3.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from launching import clean_env
from resuming import reference, summary
from seafl_dist.data import clear_cache
from soak_cases import SAME, TESTS, cases, kills

pytestmark = pytest.mark.dist
NAMES = ["dp-cap", "device-eval", "churn", "lightning", "datamodule", "scaffold"]


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    base = tmp_path_factory.mktemp("soak")
    args, mods = cases(base)
    assert list(args) == NAMES
    plan = {"cases": [{"args": args[n], "out": str(base / "w3" / n)} for n in NAMES],
            "kills": kills(len(NAMES), worker=1)}
    (base / "plan.json").write_text(json.dumps(plan))
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(mods)] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           f"--max-restarts={len(plan['kills'])}", str(TESTS / "soak_driver.py"), str(base / "plan.json")]
    proc = subprocess.run(cmd, cwd=base, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return base, args, mods, proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_each_case_survives_its_kills_with_the_uninterrupted_bytes(soak, name, monkeypatch):
    base, args, mods, err = soak
    out = base / "w3" / name
    # both kills of this case happened and were resumed from: the worker's after aggregation 2, rank 0's from 3
    assert err.count(f"seafl: resumed {out} after aggregation 2 ") == 1, err[-5000:]
    assert err.count(f"seafl: resumed {out} after aggregation 3 ") == 1, err[-5000:]
    monkeypatch.syspath_prepend(str(mods))
    try:
        ref = reference(base / "w1" / name, args[name])
    finally:
        clear_cache()
    compared = [f for f in SAME if (ref / f).exists()]
    assert {"events.jsonl", "metrics.csv", "model.pt"} <= set(compared)
    for f in SAME:
        assert (out / f).exists() == (ref / f).exists(), f
    for f in compared:
        assert (out / f).read_bytes() == (ref / f).read_bytes(), f"{name}: {f} differs from the uninterrupted run"
    s_ref, s_got = summary(ref), summary(out)
    assert s_got["status"] == "completed"
    s_ref.pop("wall_time_s", None), s_got.pop("wall_time_s", None)  # absent under DP
    assert s_got == s_ref, {k: (s_ref.get(k), s_got.get(k)) for k in {*s_ref, *s_got} if s_ref.get(k) != s_got.get(k)}
    assert not list(out.glob("checkpoint-*")) and not list(out.glob("residuals-*")) and not (out / "private").exists()
    if name == "dp-cap":
        assert s_got["privacy"]["epsilon"] > 0, s_got.get("privacy")  # central DP's ε and, beside it, DP-SGD's
        assert s_got["dp_sgd"]["epsilon"]["max"] > 0 and s_got["dp_sgd"]["epsilon"]["devices_charged"] > 0
    if name == "device-eval":
        assert "device_metrics.csv" in compared
    if name == "lightning":
        assert "train_log.csv" in compared
    assert torch.load(out / "model.pt", weights_only=True)  # a state_dict
