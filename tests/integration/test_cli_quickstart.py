"""The README's quickstart, unchanged, ends well whatever kernels the CPU gives it (about a minute on 2 cores):
with ``ONEDNN_MAX_CPU_ISA=AVX2`` (another machine's kernels, so other rounding, on this one) here, and at this
machine's default oneDNN ISA in test_readme_examples.py (the README's first run, as written, with the same checks).
The bits differ between the two; the outcome must not: no divergence and a final accuracy of at least 0.95
(docs/running.md#the-same-outcome-on-every-machine)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seafl_dist.report.trace import check_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["AVX2"])
def test_quickstart_ends_well_at_every_isa(isa, tmp_path):
    out = tmp_path / "quickstart"
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    if isa != "default":
        env["ONEDNN_MAX_CPU_ISA"] = isa
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", "configs/quickstart.yaml", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["diverged_at"] is None, summary
    assert "diverged" not in proc.stderr
    assert summary["final_accuracy"] >= 0.95, summary
    ttt = summary["time_to_target"]["0.9"]
    assert ttt is not None and ttt <= summary["virtual_time"]
    assert check_run(out) == []
    print(f"quickstart ({isa}): final accuracy {summary['final_accuracy']:.4f}, best {summary['best_accuracy']:.4f}, "
          f"90% at {ttt:.1f} virtual s, {summary['wall_time_s']:.1f} s real")
