"""The package as it was at a git revision of this clone, run beside today's code (tests that compare
the files two versions of the code write). Without that history (a shallow clone) such tests skip."""
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[1]


def package_at(rev: str, where: Path) -> Path:
    """``seafl_dist`` at git revision ``rev``, extracted under ``where`` (a directory for PYTHONPATH)."""
    try:
        blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "seafl_dist"],
                              check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"git revision {rev} is not in this clone ({err}); the old files cannot be made")
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(where, filter="data")
    return where


def run(package: Path | None, out: Path, extra: list[str]) -> None:
    """``seafl run`` of the small quickstart with ``extra`` into ``out``, by ``package`` (None: this clone's
    code, whichever seafl_dist the interpreter has installed)."""
    env = {k: v for k, v in os.environ.items() if k != "SEAFL_FAULT"}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(package if package is not None else ROOT)
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *extra,
                           "--out", str(out)], cwd=out.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
