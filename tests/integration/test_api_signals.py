"""``seafl_dist.run`` keeps the CLI's promises in one process (tests/api_driver.py, a user's script).

SIGINT, SIGUSR1 and SIGTERM, each at an exact point (the ``SEAFL_FAULT`` hook), end three calls in a
row with :class:`seafl_dist.RunInterrupted` after a checkpoint; a fourth call resumes and completes
byte-identical to an uninterrupted run. The script's own handlers are back after every call and
never called. A run that fails raises :class:`seafl_dist.RunFailed`; off the main thread the run
goes on without handlers and says so once.
"""
import json
import os
import subprocess
import sys

from resuming import ROOT, assert_same_run, reference, summary
from small_runs import SMALL

DRIVER = ROOT / "tests" / "api_driver.py"


def drive(scenario, out, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("SEAFL_FAULT", "RANK", "WORLD_SIZE")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(DRIVER), scenario, str(out)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    called = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("CALLED ")]
    assert proc.returncode == 0 and called == [[]], proc.stderr[-3000:]
    return results, proc.stderr


def test_each_signal_interrupts_a_run_and_the_next_call_resumes(tmp_path):
    ref = reference(tmp_path / "ref", SMALL)
    results, err = drive("signals", tmp_path / "run")
    assert [(r["outcome"], r.get("signal")) for r in results] == [
        ("RunInterrupted", "SIGINT"), ("RunInterrupted", "SIGUSR1"), ("RunInterrupted", "SIGTERM"), ("returned", None)]
    assert all(r["handlers_restored"] for r in results)
    assert all(r["is_keyboard_interrupt"] for r in results[:3])
    assert results[3]["status"] == "completed" and err.count("seafl: resumed") == 3
    assert_same_run(ref, tmp_path / "run")


def test_a_failed_run_raises_run_failed(tmp_path):
    (result,), _ = drive("fail", tmp_path / "run")
    assert result["outcome"] == "RunFailed" and "injected failure" in result["message"], result
    assert result["summary"] == "failed" and result["handlers_restored"]
    assert summary(tmp_path / "run")["status"] == "failed"


def test_off_the_main_thread_the_run_goes_on_without_handlers(tmp_path):
    (result,), err = drive("thread", tmp_path / "run")
    assert result["outcome"] == "returned" and result["status"] == "completed"
    assert err.count("not on the main thread") == 1
