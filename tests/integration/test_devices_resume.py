"""A run with a device profile and dropouts, killed and resumed, ends byte-identical (issue 17).

The kill (``SEAFL_FAULT=during_aggregate:3``, checkpoints every 2 aggregations) comes when a job
that started *between* aggregations (a slot refilled after a drop) is in flight at the
checkpoint, so the replay must re-dispatch it. The profile may move (its path is free on
resume); a profile of other content is refused in one line, and the run dir is left as it was.
"""
import json
import shutil

import pytest

import in_process
from device_runs import churn_overrides, write_profile
from one_line import one_error_line
from resuming import assert_same_run, checkpoint_versions, cli, dir_bytes, reference, run_args
from small_runs import SMALL

EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]


@pytest.fixture
def here():
    """``seafl ARGS`` in this process (tests/in_process.py), as a finished process.
    For the refused resumes; the killed runs and the resumed one stay real processes (``cli``)."""
    return in_process.seafl


def _mid_start_in_flight(run_dir, version: int) -> bool:
    """A job started between aggregations before aggregation ``version`` and aggregated after it."""
    ev = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    aggs = [e for e in ev if e["event"] == "aggregate"]
    at = {e["time"] for e in aggs}
    later = {u["job"] for e in aggs if e["version"] > version for u in e["updates"]}
    return any(e["event"] == "start" and 0 < e["time"] < aggs[version - 1]["time"] and e["time"] not in at
               and e["job"] in later for e in ev)


def test_killed_profiled_run_resumes_to_the_same_bytes_from_a_moved_profile(tmp_path):
    profile = write_profile(tmp_path / "devices.csv")
    overrides = churn_overrides(profile) + EVERY_2
    ref = reference(tmp_path / "ref", overrides)
    assert _mid_start_in_flight(ref, 2), "the schedule no longer has a refilled job in flight at the checkpoint"
    out = tmp_path / "run"
    stopped = cli(*run_args(overrides, out), fault="during_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    moved = tmp_path / "elsewhere" / "same-profile.csv"
    moved.parent.mkdir()
    shutil.move(profile, moved)
    resumed = cli("run", "--resume", out, f"devices.profile={moved}")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stderr
    assert_same_run(ref, out)


def test_resume_with_a_profile_of_other_content_is_refused(tmp_path, here):
    profile = write_profile(tmp_path / "devices.csv")
    out = tmp_path / "run"
    stopped = cli(*run_args(churn_overrides(profile) + EVERY_2, out), fault="after_aggregate:2")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    profile.write_text(profile.read_text().replace("phone,0.03", "phone,0.04"))
    before = dir_bytes(out)
    refused = here("run", "--resume", out)
    assert refused.returncode == 2
    one_error_line(refused.stderr, "devices.profile", "other content")
    assert dir_bytes(out) == before


def test_a_run_without_a_profile_resumed_with_one_is_refused(tmp_path, here):
    """devices.profile's path is free on resume, but none -> one is not a moved profile: the whole schedule changes."""
    out = tmp_path / "run"
    stopped = cli(*run_args([*SMALL, *EVERY_2], out), fault="after_aggregate:2")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    profile = write_profile(tmp_path / "devices.csv")
    before = dir_bytes(out)
    refused = here("run", "--resume", out, f"devices.profile={profile}")
    assert refused.returncode == 2
    one_error_line(refused.stderr, "devices.profile", str(profile), "the run had none")
    assert dir_bytes(out) == before


def test_a_completed_run_is_done_only_with_its_own_profile_content(tmp_path):
    """`seafl run` again, and a sweep, skip a completed profiled run only while the profile's content is the run's."""
    from types import SimpleNamespace

    from small_runs import QUICKSTART
    from seafl_dist.experiments.runner import _why_rerun
    from seafl_dist.runtime.checkpoint import CheckpointError, plan
    from seafl_dist.settings import load_config

    profile = write_profile(tmp_path / "devices.csv")
    out = reference(tmp_path / "run", churn_overrides(profile))
    cfg = load_config(QUICKSTART, churn_overrides(profile))
    assert plan(cfg, out, explicit=False).action == "completed"
    assert _why_rerun(SimpleNamespace(config=cfg), out) is None
    profile.write_text(profile.read_text().replace("laptop,0.01", "laptop,0.02"))
    assert "other content" in _why_rerun(SimpleNamespace(config=cfg), out)
    with pytest.raises(CheckpointError, match="says completed, but devices.profile .* other content"):
        plan(cfg, out, explicit=False)
    assert plan(cfg, out, explicit=False, overwrite=True).action == "fresh"
