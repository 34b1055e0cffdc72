"""``torchrun --nproc_per_node=3 -m seafl_dist run ... --dry-run``: rank 0 checks and reports the layout,
the other ranks exit at once; no process group is formed, nothing is trained or written."""
import os
import time

import pytest

from launching import run_torchrun
from small_runs import SMALL

pytestmark = pytest.mark.dist


def files_under(folder):
    return sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names)


def test_dry_run_under_torchrun_w3(tmp_path):
    before = files_under(tmp_path)
    t0 = time.monotonic()
    proc = run_torchrun(3, *SMALL, "--out", tmp_path / "run", "--dry-run", cwd=tmp_path)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("config: quickstart") == 1  # rank 0 alone prints
    assert "ranks: 3 ranks: rank 0 aggregates, 2 worker(s) train (runtime.placement=balanced), on cpu" in proc.stdout
    assert f"run dir: {tmp_path / 'run'}: fresh (made when the run starts)" in proc.stdout
    assert "running quickstart" not in proc.stderr  # no run started, so no process group was formed
    assert files_under(tmp_path) == before and not (tmp_path / "run").exists()
    print(f"torchrun W=3 --dry-run: {took:.1f}s")


def test_missing_data_under_torchrun_is_one_line_from_rank_0(tmp_path):
    proc = run_torchrun(3, *SMALL, "data.name=mnist", f"data.root={tmp_path / 'nodata'}", "--out", tmp_path / "run",
                        "--dry-run", cwd=tmp_path)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("seafl: error: ")]
    assert len(errors) == 1 and "dataset 'mnist' not found" in errors[0], proc.stderr
    assert "/seafl_dist/" not in proc.stderr  # torchrun reports the exit code; no frame of ours
    assert not (tmp_path / "run").exists()
