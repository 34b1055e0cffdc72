"""What a process pays before its first step, measured side by side in fresh interpreters (CPU seconds, user + sys).

    python benchmarks/startup.py [--repeats 3]

Rows: ``import torch`` alone; a rank's imports (runtime.inprocess + runtime.distributed); the digits training set
loaded as seafl loads it (data/digits.py: scikit-learn's CSV read without importing scikit-learn); the same rows
through scikit-learn (``load_digits`` + ``train_test_split``, as seafl did before 2026-11-28); building an SGD
optimiser (torch.optim imports torch._dynamo on first use); and a whole 1-aggregation quickstart run. Each row is a
fresh ``python -c`` whose CPU time is read from ``resource.getrusage(RUSAGE_CHILDREN)``; the median of the repeats
is printed, with each row's ratio to ``import torch``.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ROWS = {
    "import torch": "import torch",
    "a rank's imports": "import seafl_dist.runtime.inprocess, seafl_dist.runtime.distributed",
    "digits, seafl's reader": "import torch; from seafl_dist.data import load_dataset; "
                              "load_dataset('digits', train=True, seed=0)",
    "digits via scikit-learn": "import torch, numpy as np; from sklearn.datasets import load_digits; "
                               "from sklearn.model_selection import train_test_split; d = load_digits(); "
                               "train_test_split(np.arange(len(d.target)), test_size=0.2, random_state=0, "
                               "stratify=d.target)",
    "torch + an SGD optimiser": "import torch; torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)",
}


def cpu_of(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = {name: [sys.executable, "-c", code] for name, code in ROWS.items()}
    run = "a 1-aggregation quickstart run"
    with tempfile.TemporaryDirectory() as tmp:
        times = {name: [] for name in [*rows, run]}
        for r in range(args.repeats):  # interleaved, so a burst of load hits every row alike
            # a fresh run dir each time: the same config's completed dir would be returned at once
            rows[run] = [sys.executable, "-m", "seafl_dist", "run", str(ROOT / "configs" / "quickstart.yaml"),
                         "run.max_aggregations=1", "runtime.threads=1", "logging.progress=none", "--out",
                         f"{tmp}/run{r}"]
            for name, argv in rows.items():
                times[name].append(cpu_of(argv))
    base = statistics.median(times["import torch"])
    print(f"{'':34s} {'CPU s (median of ' + str(args.repeats) + ')':>24s} {'x import torch':>15s}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:34s} {m:24.2f} {m / base:15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
