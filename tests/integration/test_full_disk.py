"""A full disk (issue 16, point 6): one line naming the file and the cause, the last checkpoint kept, and
the same command resumes once there is space again, to the bytes of an uninterrupted run.

The run dir is a small tmpfs (root only; skipped elsewhere). The run stops itself right after
aggregation V (``SEAFL_FAULT=after_aggregate:V:STOP``, checkpoint V written), the test fills the
tmpfs, and SIGCONT lets the run meet the full disk at its next write that needs a new page (tmpfs
allocates 4 KiB pages, so appends within a file's last page still fit):
- a checkpoint: V = 2 with 16 KiB left, which take aggregation 3's lines but not checkpoint 3;
- events.jsonl: V is the first aggregation after which events.jsonl grows into a new page
  (computed from the uninterrupted run's trace), nothing left.
- metrics.csv: V is the aggregation after which metrics.csv grows into its second page (~60 rows,
  so a longer run), nothing left. Its row is written before the events are flushed.
"""
import json
import signal
import time
from pathlib import Path

import pytest

from resuming import assert_same_run, checkpoint_path, checkpoint_versions, cli, reference, run_args
from seafl_dist.cli import main as seafl_main
from seafl_dist.runtime import checkpoint
from seafl_dist.runtime.runlock import NAME
from seafl_dist.settings import load_config
from small_runs import QUICKSTART, SMALL
from tmpfs import fill, tmpfs

ARGS = [*SMALL, "run.max_aggregations=8", "run.checkpoint_every=1", "run.checkpoint_every_s=null"]
PAGE = 4096


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return reference(tmp_path_factory.mktemp("full-disk") / "ref", ARGS)


def events_bytes_after(ref: Path) -> dict[int, int]:
    """events.jsonl's length at the consistent state after each aggregation (its eval and new starts written)."""
    lines = (ref / "events.jsonl").read_bytes().splitlines(keepends=True)
    events = [json.loads(line) for line in lines]
    out = {}
    for i, ev in enumerate(events):
        if ev["event"] == "aggregate":
            j = i + 1
            while j < len(events) and (events[j]["event"] == "start" or
                                       (events[j]["event"] == "eval" and events[j]["version"] == ev["version"])):
                j += 1
            out[ev["version"]] = sum(map(len, lines[:j]))
    return out


def first_page_crossing(ref: Path) -> int:
    ends = events_bytes_after(ref)
    pages = {v: -(-n // PAGE) for v, n in ends.items()}
    return next(v for v in sorted(pages) if v >= 1 and v + 1 in pages and pages[v + 1] > pages[v])


def wait_stopped(proc, timeout=120):
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never reached its stop"
        time.sleep(0.05)


def stop_break_continue(out: Path, version: int, break_disk, args=ARGS) -> str:
    """Run into ``out``, stopped after aggregation ``version``; ``break_disk()``; continue; return stderr."""
    proc = cli(*run_args(args, out), fault=f"after_aggregate:{version}:STOP", background=True)
    try:
        wait_stopped(proc)
        break_disk()
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    return err


def assert_one_line_and_resume(err: str, out: Path, victim: str, cause: str, version: int, ref: Path, capsys,
                               args=ARGS):
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "error" in line] == [
        f"seafl: error: cannot write {out / victim}: {cause}; private/checkpoint-{version:08d}.pt is kept: make room "
        f"(or fix the cause) and rerun the same command to resume from aggregation {version}"], err[-3000:]
    assert checkpoint_versions(out) == ([version - 1, version] if version > 1 else [version])
    assert not list(out.glob("*.tmp")) and not list(out.glob("private/*.tmp")), "a cut-short write left its temp file"
    assert not (out / NAME).exists(), "the failed run kept its lock"
    kept = checkpoint.load(checkpoint_path(out, version), load_config(QUICKSTART, args))
    assert kept["version"] == version
    capsys.readouterr()
    assert seafl_main([str(a) for a in run_args(args, out)]) == 0  # space is back: the same command
    assert f"resumed {out} after aggregation {version}" in capsys.readouterr().err
    assert_same_run(ref, out)


@pytest.mark.parametrize("victim", ["checkpoint", "events.jsonl"])
def test_a_full_disk_stops_the_run_in_one_line_and_the_same_command_resumes(victim, ref, tmp_path, capsys):
    version, leave = (2, 16 << 10) if victim == "checkpoint" else (first_page_crossing(ref), 0)
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        out, filled = disk / "run", []
        err = stop_break_continue(out, version, lambda: filled.append(fill(disk, leave=leave)))
        filled[0].unlink()
        name = f"private/checkpoint-{version + 1:08d}.pt" if victim == "checkpoint" else victim
        assert_one_line_and_resume(err, out, name, "No space left on device", version, ref, capsys)


@pytest.fixture(scope="module")
def long_ref(tmp_path_factory):
    """A longer run: metrics.csv (a row of ~66 bytes per aggregation) needs a second page only after ~60."""
    args = [*ARGS, "run.max_aggregations=70"]
    return args, reference(tmp_path_factory.mktemp("full-disk-long") / "ref", args)


def test_a_full_disk_while_writing_metrics_is_one_line_too(long_ref, tmp_path, capsys):
    args, ref = long_ref
    lines = (ref / "metrics.csv").read_bytes().splitlines(keepends=True)  # the header, then version 0, 1, ...
    pages = [-(-sum(map(len, lines[:v + 2])) // PAGE) for v in range(len(lines) - 1)]
    version = next(v for v in range(1, len(pages) - 1) if pages[v + 1] > pages[v])
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        out, filled = disk / "run", []
        err = stop_break_continue(out, version, lambda: filled.append(fill(disk)), args)
        filled[0].unlink()
        assert_one_line_and_resume(err, out, "metrics.csv", "No space left on device", version, ref, capsys, args)
