"""Helpers of the checkpoint/resume tests: reference runs, killed runs, and what "identical" means.

A reference run is made in this pytest process (tests/in_process.py): no interpreter start, so the suite pays for the killed and
resumed runs only. Killed runs are real ``python -m seafl_dist run`` processes; the
``SEAFL_FAULT`` hook (runtime/signals.py) stops them at an exact point of an exact aggregation.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import in_process
from one_line import one_line
from seafl_dist.runtime.rundir import private_dir
from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[1]
SAME_BYTES = ("events.jsonl", "metrics.csv", "model.pt")


def reference(out: Path, overrides) -> Path:
    """An uninterrupted run of ``QUICKSTART + overrides`` into ``out``, in this process (tests/in_process.py); what it
    printed is passed on to this process's stdout and stderr (a test may read it with capsys)."""
    proc = in_process.seafl("run", QUICKSTART, *overrides, "--out", out)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def cli(*args, fault=None, cwd=None, timeout=300, background=False):
    """``python -m seafl_dist ARGS`` in a child process; ``fault`` sets SEAFL_FAULT."""
    env = {k: v for k, v in os.environ.items() if k != "SEAFL_FAULT"}
    env["OMP_NUM_THREADS"] = "1"
    if fault:
        env["SEAFL_FAULT"] = fault
    cmd = [sys.executable, "-m", "seafl_dist", *map(str, args)]
    if background:
        return subprocess.Popen(cmd, cwd=cwd or ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(cmd, cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def run_args(overrides, out):
    return ["run", QUICKSTART, *overrides, "--out", out]


def summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def checkpoint_versions(run_dir: Path) -> list[int]:
    """The versions of the checkpoints in the run dir's server-private part (private/); none may be at its top."""
    assert not list(Path(run_dir).glob("checkpoint-*")), "a checkpoint at the run dir's top level, not in private/"
    return sorted(int(p.stem.split("-")[1]) for p in private_dir(run_dir).glob("checkpoint-*.pt"))


def checkpoint_path(run_dir: Path, version: int) -> Path:
    """Where a run writes its checkpoint of aggregation ``version``: ``<run>/private/checkpoint-<version:08d>.pt``."""
    return private_dir(run_dir) / f"checkpoint-{version:08d}.pt"


def aggregations_in(run_dir: Path) -> int:
    path = Path(run_dir) / "events.jsonl"
    return path.read_text().count('"event": "aggregate"') if path.exists() else 0


def assert_same_run(ref: Path, got: Path) -> None:
    """events.jsonl, metrics.csv and model.pt byte-identical; the same summary but for wall time."""
    for name in SAME_BYTES:
        assert (got / name).read_bytes() == (ref / name).read_bytes(), f"{name} differs from the uninterrupted run"
    s_ref, s_got = summary(ref), summary(got)
    assert s_got["status"] == "completed"
    s_ref.pop("wall_time_s", None), s_got.pop("wall_time_s", None)  # absent under DP
    assert s_got == s_ref, {k: (s_ref.get(k), s_got.get(k)) for k in {*s_ref, *s_got} if s_ref.get(k) != s_got.get(k)}
    assert not list(got.glob("checkpoint-*")) and not private_dir(got).exists(), "a completed run keeps no private/"


def dir_bytes(run_dir: Path) -> dict:
    """Every file of a run dir with its bytes (to show that a refused resume touched nothing)."""
    return {p.name: p.read_bytes() for p in sorted(Path(run_dir).iterdir()) if p.is_file()}


def refused(argv, run_dir: Path, *, code: int = 2) -> str:
    """``seafl ARGV`` (in this process, tests/in_process.py) exits ``code`` with one line on stderr (one_line: beside
    the run's own ``seafl: running`` line; returned) and leaves every byte of ``run_dir`` as it was."""
    before = dir_bytes(run_dir) if Path(run_dir).exists() else None
    proc = in_process.seafl(*argv)
    assert proc.returncode == code, proc.stderr[-3000:]
    err = one_line(proc.stderr)
    if before is not None:
        assert dir_bytes(run_dir) == before, "a refused command changed the run dir"
    return err


__all__ = ["SMALL", "QUICKSTART"]


def killed_during_3(args, out: Path) -> dict:
    """``args`` run into ``out`` and killed during aggregation 3 (checkpointing every 2): its one checkpoint, at 2."""
    import torch
    stopped = cli(*run_args(args, out), fault="during_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2], stopped.stderr[-3000:]
    return torch.load(checkpoint_path(out, 2), map_location="cpu", weights_only=True)


def resumed_from_2(ref: Path, args, out: Path) -> None:
    """The same command again continues ``out`` after aggregation 2 to the uninterrupted run ``ref``'s bytes.

    The resume runs in this process (tests/in_process.py), which saves a child's 7 CPU seconds of imports for each
    rule with memory: what it proves is that the rule's state travels through the checkpoint, and the killed run
    that wrote it was a real process. A rule that kept its state anywhere but in ``AggregationResult.state`` (a
    module global, say) would hold the reference run's final state here, not aggregation 2's, and miss ``ref``'s
    bytes. The resume machinery itself is proven with real processes (tests/integration/test_resume.py)."""
    resumed = in_process.seafl(*run_args(args, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)
