"""A million devices, cheaply (issue 17, point 5): start-up, scheduler rate, rank 0's memory, run dir size.

    python benchmarks/population.py                        # 10k, 100k, 1M devices; no churn and dropout 0.1
    python benchmarks/population.py --sizes 10000 --aggregations 10

For each population N and each churn setting (none; ``devices.dropout=0.1``; a device profile of
1,000 rows with availability windows in a 12 s period, compute times × 50, plus that dropout) a
fresh process runs
``seafl_dist.run`` in one process on the bundled digits: M = 1,000 in flight, FedBuff K = 100,
``--aggregations`` aggregations (default 20), an evaluation every 10, idle times off. Every device
has 2 training rows drawn with replacement (``population:two_rows``, a custom split) and the
model is one linear layer (``population:linear``, 7,850 parameters), so a job trains in about a
millisecond and the **whole run**, training included, is measured. Printed per run:

- ``start-up s``: ``prepare`` (data, the million shards, the model) plus the schedule up to its
  first M starts, in the fresh process before the run (torch already imported: about 2 s more);
- ``sched jobs/s``: the bare schedule's start events per second (no training), over the run's
  aggregations (a dropped job counts as a job: its slot is refilled);
- ``run s``: the whole ``seafl_dist.run`` (start-up, training, evaluation, writing);
- ``peak RSS MB``: the process's peak resident memory (one process: it is rank 0); importing torch
  and Lightning alone peaks at about 1,010 MB here;
- ``run dir MB``: every file the run wrote.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def linear(num_classes, in_channels, image_size, width):
    """The model: one linear layer over the image (a job of 2 samples trains in about a millisecond)."""
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, num_classes))


def two_rows(labels, num_devices, seed):
    """The split: every device gets 2 training rows drawn with replacement (data.shards_overlap)."""
    import numpy as np
    rows = np.random.default_rng(seed).integers(0, len(labels), size=(num_devices, 2), dtype=np.int64)
    return list(rows)


def write_profile(path: Path, rows: int = 1000) -> Path:
    """1,000 seeded profiles: speeds 1-20 ms per sample, 1-50 MB/s, one or two windows in a 600 s period
    (online about half the time), a tenth always on."""
    import numpy as np
    r = np.random.default_rng(0)
    lines = ["id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows"]
    for i in range(rows):
        if i % 10 == 0:
            windows, period = "always", ""
        else:
            a, b, c, d = np.sort(r.choice(600, size=4, replace=False))
            windows, period = (f"{a}:{b + 150 if b + 150 < c else c}" if i % 2 else f"{a}:{b} {c}:{d}"), "600"
        lines.append(f"p{i},{r.uniform(0.001, 0.02):.5f},{r.uniform(1e6, 5e7):.0f},{r.uniform(1e6, 5e7):.0f},"
                     f"{period},{windows}")
    path.write_text("\n".join(lines) + "\n")
    return path


def config(n: int, dropout: float | None, aggregations: int, profile: str | None = None) -> dict:
    return {
        "name": f"population-{n}",
        "algorithm": {"name": "fedbuff", "buffer_size": 100},
        "devices": {"num": n, "concurrency": 1000, "dropout": dropout, "profile": profile,
                    "availability_scale": 0.02 if profile else 1.0},  # windows of seconds: jobs get cut
        "train": {"epochs": 1, "batch_size": 2, "lr": 0.05},
        "clock": {"sec_per_sample": 0.01, "compute_scale": 50.0 if profile else 1.0, "idle": {"distribution": "none"}},
        "data": {"name": "digits", "partition": "population:two_rows", "shards_overlap": True},
        "model": {"name": "population:linear"},
        "run": {"seed": 0, "max_aggregations": aggregations, "eval_every": 10, "checkpoint_every": None,
                "checkpoint_every_s": None},
        "runtime": {"threads": 1, "device": "cpu"},
        "logging": {"progress": "none"},
    }


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(n: int, dropout: float | None, aggregations: int, profile: str | None = None) -> dict:
    """One population in this fresh process: start-up and the bare schedule first, then the whole run."""
    import gc

    import seafl_dist
    from seafl_dist.api import make_config
    from seafl_dist.data import clear_cache
    from seafl_dist.runtime.setup import prepare

    cfg = make_config(config(n, dropout, aggregations, profile))
    t = time.perf_counter()
    exp = prepare(cfg)
    look = exp.schedule()
    jobs = len(look.take_while(lambda e: e["event"] == "start"))
    startup = time.perf_counter() - t
    t = time.perf_counter()
    jobs += sum(ev["event"] == "start" for ev in look)
    sched_s = time.perf_counter() - t
    del exp, look
    clear_cache()
    gc.collect()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        t = time.perf_counter()
        summary = seafl_dist.run(cfg, out=out)
        run_s = time.perf_counter() - t
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        size = dir_bytes(out)
    return {"devices": n, "dropout": dropout, "startup_s": startup, "sched_jobs_per_s": jobs / max(sched_s, 1e-9),
            "jobs": jobs, "run_s": run_s, "peak_rss_mb": rss_mb, "run_dir_mb": size / 1e6,
            "status": summary["status"], "drops": (summary.get("drops") or {}).get("total", 0)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="device counts, comma-separated")
    p.add_argument("--aggregations", type=int, default=20)
    p.add_argument("--one", nargs=3, metavar=("N", "DROPOUT", "PROFILE"), help=argparse.SUPPRESS)  # a child's run
    args = p.parse_args()
    if args.one:
        n, d = int(args.one[0]), (None if args.one[1] == "none" else float(args.one[1]))
        print(json.dumps(measure(n, d, args.aggregations, None if args.one[2] == "none" else args.one[2])))
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    print(f"{'devices':>9} {'churn':>12} {'start-up s':>10} {'sched jobs/s':>12} {'run s':>7} {'peak RSS MB':>11} "
          f"{'run dir MB':>10} {'drops':>6}  status")
    tmp = tempfile.TemporaryDirectory()
    profile = str(write_profile(Path(tmp.name) / "profile.csv"))
    for n in (int(s) for s in args.sizes.split(",")):
        for d, prof in (("none", "none"), ("0.1", "none"), ("0.1", profile)):
            proc = subprocess.run([sys.executable, __file__, "--one", str(n), d, prof, "--aggregations",
                                   str(args.aggregations)], env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{n:>9} {d:>12} failed:\n{proc.stderr[-2000:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            churn = "none" if d == "none" else f"dropout {d}" if prof == "none" else f"profile+{d}"
            print(f"{n:>9} {churn:>12} {r['startup_s']:>10.2f} {r['sched_jobs_per_s']:>12.0f} {r['run_s']:>7.1f} "
                  f"{r['peak_rss_mb']:>11.0f} {r['run_dir_mb']:>10.2f} {r['drops']:>6}  {r['status']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
