"""The README's quickstart, unchanged, reaches 90% test accuracy on digits (about a minute on 2 cores)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from seafl_dist.report.trace import check_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_reaches_90_percent(tmp_path):
    out = tmp_path / "quickstart"
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", "configs/quickstart.yaml", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["best_accuracy"] >= 0.9, summary
    assert summary["final_accuracy"] >= 0.9, summary
    ttt = summary["time_to_target"]["0.9"]
    assert ttt is not None and ttt <= summary["virtual_time"]
    assert check_run(out) == []
    print(f"quickstart: final accuracy {summary['final_accuracy']:.4f}, 90% at {ttt:.1f} virtual s, "
          f"{summary['aggregations']} aggregations, {summary['wall_time_s']:.1f} s real")
