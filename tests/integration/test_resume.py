"""Killed and resumed runs end byte-identical to uninterrupted ones (issue 9, part 1), in one process.

Every algorithm is stopped once, at a different kind of point, by the ``SEAFL_FAULT`` hook (no
timing races), then resumed by rerunning the same command (the run dir holds a checkpoint of
the same config). events.jsonl, metrics.csv and model.pt must equal the uninterrupted run's:
- seafl, seafl2: SIGKILL during aggregation 3, the last checkpoint at 2: the trace of
  aggregation 3 on disk (for seafl2 a notification whose job was in flight at the checkpoint)
  is cut away and written again;
- fedbuff: SIGKILL right after aggregation 4, which was checkpointed: nothing to cut;
- fedasync, fedavg: SIGUSR1 / SIGINT with periodic checkpoints off: the signal itself writes the
  checkpoint of the last completed aggregation, summary.json says interrupted, exit non-zero.
Jobs are in flight at every one of these points (M = 4 devices train, K = 2 are aggregated).
Two more runs are stopped from outside with real timing, by SIGKILL and by SIGTERM, and a sweep
by SIGTERM (its child checkpoints; rerunning the sweep resumes the child).
"""
import json
import signal
import time

import pytest

from resuming import (SAME_BYTES, aggregations_in, assert_same_run, checkpoint_versions, cli, reference, run_args,
                      summary)
from small_runs import PER_ALGORITHM, QUICKSTART, SMALL

EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]
EVERY_3 = ["run.checkpoint_every=3", "run.checkpoint_every_s=null"]
NO_PERIODIC = ["run.checkpoint_every=null", "run.checkpoint_every_s=null"]
# algorithm -> (fault, checkpoint settings, checkpoint version resumed from, checkpoints kept, signalled?)
# seafl2: after aggregation 3 the server notifies job 6 (started at version 2, aggregated at 4), so
# the kill during aggregation 4 has a notified job in flight past the checkpoint (checked below).
STOPS = {
    "seafl": ("during_aggregate:3", EVERY_2, 2, [2], False),
    "seafl2": ("during_aggregate:4", EVERY_3, 3, [3], False),
    "fedbuff": ("after_aggregate:4", EVERY_2, 4, [2, 4], False),
    "fedasync": ("after_aggregate:3:USR1", NO_PERIODIC, 3, [3], True),
    "fedavg": ("during_aggregate:2:INT", NO_PERIODIC, 1, [1], True),
}


def overrides(name):
    return [*SMALL, f"algorithm.name={name}", *PER_ALGORITHM[name]]


@pytest.mark.parametrize("name", list(STOPS))
def test_killed_run_resumes_to_the_same_bytes(name, tmp_path):
    fault, ckpt, at, kept, signalled = STOPS[name]
    ref = reference(tmp_path / "ref", overrides(name) + ckpt)
    out = tmp_path / "run"
    stopped = cli(*run_args(overrides(name) + ckpt, out), fault=fault)
    assert stopped.returncode != 0
    assert checkpoint_versions(out) == kept
    assert not (out / "model.pt").exists()
    if signalled:  # a signal: a summary that says so, and the last completed aggregation kept
        s = summary(out)
        assert s["status"] == "interrupted" and f"SIG{fault.split(':')[2]}" in s["error"], s
    else:  # SIGKILL: nothing but what was flushed
        assert stopped.returncode == -signal.SIGKILL and not (out / "summary.json").exists()
    if fault.startswith("during"):  # the half-done aggregation is on disk and must be cut away
        assert aggregations_in(out) == at + 1
    if name == "seafl2":  # a job in flight at the checkpoint was notified after it
        ref_events = [json.loads(line) for line in (ref / "events.jsonl").read_text().splitlines()]
        late = {u["job"] for e in ref_events if e["event"] == "aggregate" and e["version"] > at for u in e["updates"]}
        early = {e["job"] for e in ref_events if e["event"] == "start" and e["version"] < at}
        killed = (out / "events.jsonl").read_text().splitlines()
        assert any(json.loads(line)["event"] == "notify" and json.loads(line)["job"] in late & early
                   for line in killed), "no notification of an in-flight job after the checkpoint"

    resumed = cli(*run_args(overrides(name) + ckpt, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {out} after aggregation {at}" in resumed.stderr
    assert_same_run(ref, out)


@pytest.fixture(scope="module")
def longer(tmp_path_factory):
    """A 15-aggregation run (checkpoint after every one), uninterrupted: the real-timing tests' reference."""
    args = [*SMALL, "run.max_aggregations=15", "run.checkpoint_every=1"]
    return args, reference(tmp_path_factory.mktemp("longer") / "ref", args)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_stopped_from_outside_mid_run_resumes_to_the_same_bytes(sig, longer, tmp_path):
    args, ref = longer
    out = tmp_path / "run"
    proc = cli(*run_args(args, out), background=True)
    deadline = time.monotonic() + 120
    while aggregations_in(out) < 4:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, "the run ended before the signal reached it"
    assert checkpoint_versions(out), err[-2000:]
    if sig == signal.SIGTERM:
        s = summary(out)
        assert s["status"] == "interrupted" and "SIGTERM" in s["error"]
        assert "interrupted" in err
        notes = [line for line in err.splitlines() if "holds server-private files" in line]  # issue 60 B
        assert len(notes) == 1 and f"in {out / 'private'} (" in notes[0] and f"seafl release {out} OUT" in notes[0]
    resumed = cli("run", "--resume", out)  # the config comes from the run dir
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_run(ref, out)


def test_a_stopped_sweep_checkpoints_its_child_and_a_rerun_resumes_it(longer, tmp_path):
    args, ref = longer
    sweep_dir = tmp_path / "sweep"
    proc = cli("sweep", QUICKSTART, *args, "--seeds", "0", "--out", sweep_dir, "--name", "one", background=True)
    deadline = time.monotonic() + 120
    while not (runs := [d for d in sweep_dir.glob("*/") if aggregations_in(d) >= 3]):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # as SLURM does: the sweep stops its child, which checkpoints
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err[-3000:]
    (run,) = runs
    assert summary(run)["status"] == "interrupted" and checkpoint_versions(run), err[-3000:]
    again = cli("sweep", QUICKSTART, *args, "--seeds", "0", "--out", sweep_dir, "--name", "one")
    assert again.returncode == 0, again.stderr[-3000:]
    assert summary(run)["status"] == "completed"
    assert "resumed" in (run / "log.txt").read_text()
    for name in SAME_BYTES:
        assert (run / name).read_bytes() == (ref / name).read_bytes(), name
