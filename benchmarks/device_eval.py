"""What device evaluation costs (issue 38 B, "Cost, measured"): per evaluation, and a million devices with it on.

    python benchmarks/device_eval.py                    # the three measurements below
    python benchmarks/device_eval.py --million 0        # without the million-device runs

1. **quickstart** (configs/quickstart.yaml: digits, 30 devices, LeNet-5) with ``data.device_holdout=0.2`` and every
   device evaluated: one device evaluation of a version (the stage's whole step: the one pass over the held-out
   rows, the statistics, a row per device and the summary rows written) beside the central evaluation of the
   same version, each the median of ``--repeat`` repetitions in one process, one torch thread.
2. **10,000 devices, a sample of 1,000**: digits split by ``five_rows`` (5 rows a device, drawn with replacement:
   ``data.shards_overlap``), 20% held out (1 row a device), LeNet-5: the split and the gathering of the sample's
   rows (once, at start-up), and one device evaluation, as in 1.
3. **A million devices** (benchmarks/population.py's setup: 2 rows a device, one linear layer, FedBuff K = 100,
   M = 1,000, 20 aggregations, an evaluation every 10), ``data.device_holdout=0.5`` (1 row held out, 1 trained),
   ``run.device_eval_every=10`` and ``run.device_eval_sample=1000``, against the same population with no holdout
   and no device evaluation: start-up (``prepare``, the split and the gathering included) and the whole run, each
   in a fresh process.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]


def five_rows(labels, num_devices, seed):
    """The 10,000-device split: every device gets 5 training rows drawn with replacement (data.shards_overlap)."""
    import numpy as np
    return list(np.random.default_rng(seed).integers(0, len(labels), size=(num_devices, 5), dtype=np.int64))


def per_evaluation(overrides: list[str], repeat: int) -> dict:
    """One configuration's start-up share of device evaluation and the cost of one evaluation (module doc, 1 and 2)."""
    import torch

    from checkpoint import timed  # benchmarks/checkpoint.py: the median of repeated calls
    from seafl_dist.runtime.device_eval import DeviceEvaluation, gather, held_out_split
    from seafl_dist.runtime.setup import make_shards, prepare
    from seafl_dist.settings import load_config
    from seafl_dist.train import evaluate
    torch.set_num_threads(1)
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", [*overrides, "runtime.device=cpu"])
    exp = prepare(cfg)
    t = time.perf_counter()
    shards, held = held_out_split(cfg, exp.train, make_shards(cfg, exp.train)[0])
    gather(cfg, exp.train, exp.test, held, None)
    setup_s = time.perf_counter() - t
    stage = DeviceEvaluation(exp)
    with tempfile.TemporaryDirectory() as tmp:
        stage.open(tmp, None)
        flat = exp.initial_flat()
        version = iter(range(10 ** 6))
        device_s = timed(lambda: stage._evaluate(next(version), 0.0, flat), repeat)
        stage.close()
    model = exp.new_model()
    central_s = timed(lambda: evaluate(model, flat, exp.test), repeat)
    return {"devices": exp.num_devices, "evaluated": int(len(exp.held_out.devices)),
            "held_out_rows": int(exp.held_out.offsets[-1]), "test_rows": len(exp.test), "setup_s": setup_s,
            "device_eval_s": device_s, "central_eval_s": central_s}


def million(on: bool, aggregations: int) -> dict:
    """A fresh process's start-up and whole run at a million devices (module doc, 3)."""
    import resource

    import seafl_dist
    from population import config
    from seafl_dist.api import make_config
    from seafl_dist.runtime.setup import prepare
    tree = config(1_000_000, None, aggregations)
    if on:
        tree["data"]["device_holdout"] = 0.5
        tree["run"].update(device_eval_every=10, device_eval_sample=1000)
    cfg = make_config(tree)
    t = time.perf_counter()
    prepare(cfg)
    startup = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        summary = seafl_dist.run(cfg, out=Path(tmp) / "run")
        run_s = time.perf_counter() - t
        evals = len((Path(tmp) / "run" / "device_summary.csv").read_text().splitlines()) - 1 if on else 0
    return {"startup_s": startup, "run_s": run_s, "status": summary["status"], "device_summary_rows": evals,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--million", type=int, default=1, help="1: also the million-device runs (minutes); 0: skip them")
    p.add_argument("--aggregations", type=int, default=20)
    p.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(million(args.child == "on", args.aggregations)))
        return 0
    runs = {"quickstart (30 devices, all)": ["data.device_holdout=0.2", "run.device_eval_every=1"],
            "10,000 devices, sample 1,000": ["devices.num=10000", "devices.concurrency=100", "algorithm.buffer_size=10",
                                             "data.partition=device_eval:five_rows", "data.shards_overlap=true",
                                             "data.device_holdout=0.2", "run.device_eval_every=1",
                                             "run.device_eval_sample=1000"]}
    print(f"{'setup':>30} {'devices':>8} {'evaluated':>9} {'held-out rows':>13} {'split+gather s':>14} "
          f"{'device eval s':>13} {'central eval s':>14}")
    for name, overrides in runs.items():
        r = per_evaluation(overrides, args.repeat)
        print(f"{name:>30} {r['devices']:>8} {r['evaluated']:>9} {r['held_out_rows']:>13} {r['setup_s']:>14.3f} "
              f"{r['device_eval_s']:>13.4f} {r['central_eval_s']:>14.4f}", flush=True)
    if not args.million:
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    print(f"\n1,000,000 devices, {args.aggregations} aggregations:")
    print(f"{'device evaluation':>36} {'start-up s':>10} {'run s':>7} {'peak RSS MB':>11} {'evaluations':>11}  status")
    for on in ("off", "on"):
        proc = subprocess.run([sys.executable, __file__, "--child", on, "--aggregations", str(args.aggregations)],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{on:>36} failed:\n{proc.stderr[-2000:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        what = "off" if on == "off" else "on: holdout 0.5, sample 1,000, every 10"
        print(f"{what:>36} {r['startup_s']:>10.2f} {r['run_s']:>7.1f} {r['peak_rss_mb']:>11.0f} "
              f"{r['device_summary_rows'] // 2:>11}  {r['status']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
