"""benchmarks/gpu_throughput.py on the CPU at tiny sizes (--smoke): the script the GPU session runs
must not rot between sessions that have a GPU. Every row prints a number; the profile prints its table."""
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_throughput.py"


def bench(*args):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--device", "cpu", *args], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_smoke_prints_bare_ceiling_ours_and_full_run_rows():
    out = bench("--models", "lenet5", "--groups", "1,2", "--full-groups", "2")
    for what in ("bare eager, batch 32", "bare ceiling, batch 64 (G=2)", "ours G=1", "ours G=2",
                 "full in-process run, G=2"):
        row = next(line for line in out.splitlines() if what in line)
        assert re.search(r"\s[\d,]+\s", row) and "nan" not in row, row


def test_profile_prints_where_the_time_goes():
    out = bench("--profile", "lenet5:2")
    assert re.search(r"profile: lenet5 ours G=2 32, \d+ steps per job: [\d,]+ images/s", out), out
    assert "Self CPU time total" in out
