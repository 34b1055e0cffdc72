"""The longer kill soak (issue 52): the CI soak's cases (tests/soak_cases.py), each killed ``--rounds`` times on a
worker and on rank 0, in one torchrun job, each compared with its uninterrupted one-process run.

    nice python benchmarks/kill_soak.py [--rounds 3] [--world 3] [--dir DIR] [--cases dp-cap,churn]

Each case runs 4 x rounds + 2 aggregations; round r kills worker rank W - 1 after aggregation 2 + 4r and rank 0 during
aggregation 4 + 4r (2 x rounds kills a case; torchrun restarts the job after each). Prints one row a case: kills,
the resumes seen, and whether events.jsonl, metrics.csv, model.pt, device evaluation's files, train_log.csv and
summary.json (but for wall time; DP's ε and participation counts included) equal the uninterrupted run's. A
script, not a test; docs/failures.md quotes its table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from soak_cases import SAME, TESTS, cases, kills  # noqa: E402


def same(ref: Path, got: Path) -> list[str]:
    """The files (and summary.json) where ``got`` differs from ``ref``."""
    bad = [f for f in SAME if (ref / f).exists() != (got / f).exists()
           or ((ref / f).exists() and (ref / f).read_bytes() != (got / f).read_bytes())]
    if not (got / "summary.json").exists():
        return bad + ["summary.json"]
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    return bad + ([] if s_ref == s_got else ["summary.json"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--cases", default=None, help="comma-separated names (default: all)")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="kill-soak-"))
    every, mods = cases(base, aggregations=4 * args.rounds + 2)
    names = args.cases.split(",") if args.cases else list(every)
    plan = {"cases": [{"args": every[n], "out": str(base / "w" / n)} for n in names],
            "kills": kills(len(names), args.rounds, worker=args.world - 1)}
    (base / "plan.json").write_text(json.dumps(plan))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "SEAFL_FAULT"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), str(mods), str(ROOT)]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={args.world}", f"--max-restarts={len(plan['kills'])}",
                           str(TESTS / "soak_driver.py"), str(base / "plan.json")],
                          cwd=base, env=env, capture_output=True, text=True)
    soak_s = time.monotonic() - t0
    (base / "soak.err").write_text(proc.stderr)
    print(f"torchrun exit {proc.returncode} after {soak_s:.0f} s ({len(plan['kills'])} kills); stderr in "
          f"{base / 'soak.err'}", flush=True)
    print("| case | kills | resumes | differs from the uninterrupted run |")
    print("|---|---|---|---|")
    for n in names:
        out, ref = base / "w" / n, base / "ref" / n
        one = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(ROOT / "configs" / "quickstart.yaml"),
                              *every[n], "--out", str(ref)], cwd=base, env=env, capture_output=True, text=True)
        diff = same(ref, out) if one.returncode == 0 else [f"the reference failed: {one.stderr[-300:]}"]
        resumes = proc.stderr.count(f"seafl: resumed {out} after aggregation")
        print(f"| {n} | {2 * args.rounds} | {resumes} | {', '.join(diff) or 'nothing'} |", flush=True)


if __name__ == "__main__":
    main()
