"""Small tmpfs mounts for the tests of full disks and read-only run dirs (root only; CI runs as root).

A test that needs one skips, with the reason, where this user or container may not mount, except
under CI=true, where it fails: CI runs as root and can mount one, so a CI run never passes by skipping
the full-disk tests (as the Slurm tests do)."""
import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(where: Path, options: str):
    """Mount a tmpfs with ``options`` (e.g. ``size=8m`` or ``size=1m,ro``) at ``where`` for the block."""
    where = Path(where)
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def unavailable(why: str) -> None:
    """Skip the test, or fail it under CI=true."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"the full-disk tests cannot run under CI: {why}", pytrace=False)
    pytest.skip(why)


def fill(where: Path, leave: int = 0) -> Path:
    """Fill the file system of ``where`` with one file, then free ``leave`` bytes of it; returns the file."""
    filler = Path(where) / "filler"
    block = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler
