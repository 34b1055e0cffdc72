"""Whole runs of the CIFAR-10 ResNet-18 config, counting every image trained.

    python benchmarks/gpu_full_run.py                      # `seafl run configs/cifar10_resnet18.yaml`, >= 200 jobs
    python benchmarks/gpu_full_run.py --arm runtime.deterministic=true --arm runtime.batch_jobs=1

``main``: the command a user types, as a process (start-up, data loading, every evaluation and
aggregation included), on synthetic CIFAR-10 of the real size (50,000 + 10,000 images in the real
pickle format); images = the shard size x epochs of every job whose update reached the server
(``finish`` events; jobs a group trained ahead that the run never used are not counted), over the
process's wall time. One arm per ``--arm`` (overrides separated by spaces; the first arm is the
config as it is). ``full_run``: the same workload in-process (the last rows of gpu_throughput.py)."""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_cifar(root: Path, n_train: int, n_test: int, seed=0) -> None:
    """Synthetic images in the real cifar-10-batches-py pickle format."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    per = -(-n_train // 5)
    for name, n in [(f"data_batch_{k}", per) for k in range(1, 6)] + [("test_batch", n_test)]:
        with open(base / name, "wb") as f:
            pickle.dump({"labels": rng.integers(0, 10, n).tolist(),
                         "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}, f)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{k}" for k in range(10)]}, f)


def full_run(args, g: int, root: Path, device) -> tuple[float, int, float]:
    """(images/s, jobs trained, wall s) of an in-process run of the CIFAR ResNet-18 workload."""
    from seafl_dist.settings import load_config
    from seafl_dist.runtime.executor import InProcessExecutor
    from seafl_dist.runtime.server import Server
    from seafl_dist.runtime.setup import prepare
    cfg_path = Path(__file__).resolve().parents[1] / "configs" / "cifar10_resnet18.yaml"
    s = args.full_scale
    over = [f"data.root={root}", f"devices.num={s['devices']}", f"devices.concurrency={s['concurrency']}",
            f"algorithm.buffer_size={s['k']}", f"run.max_aggregations={s['aggs'] if g > 1 else s['aggs_g1']}",
            f"runtime.batch_jobs={g}", f"model.width={args.width}", "logging.progress=none",
            f"runtime.device={device.type}", f"train.epochs={s['epochs']}", f"runtime.precision={args.full_precision}"]
    cfg = load_config(cfg_path, over)
    exp = prepare(cfg)
    executor = InProcessExecutor(exp)
    trained = []
    inner = executor.trainer.train

    def counting(specs, starts, on_step=None):
        trained.extend(specs)
        return inner(specs, starts, on_step)
    executor.trainer.train = counting
    with tempfile.TemporaryDirectory() as out:
        summary = Server(exp, executor, out).run()
    images = sum(len(exp.shards[sp.device]) * sp.epochs for sp in trained)
    return images / summary["wall_time_s"], len(trained), summary["wall_time_s"]


ROOT = Path(__file__).resolve().parents[1]


def cli_run(data_root: Path, out: Path, jobs: int, overrides: list[str]) -> dict:
    """One ``seafl run`` of the CIFAR-10 ResNet-18 config in a process; its images/s."""
    import yaml
    k = yaml.safe_load((ROOT / "configs" / "cifar10_resnet18.yaml").read_text())["algorithm"]["buffer_size"]
    cmd = [sys.executable, "-m", "seafl_dist", "run", str(ROOT / "configs" / "cifar10_resnet18.yaml"),
           f"data.root={data_root}", f"run.max_aggregations={-(-jobs // k)}", "logging.progress=none", *overrides,
           "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"seafl run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    n_samples = json.loads((out / "partition.json").read_text())["n_samples"]
    finishes = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    finishes = [e for e in finishes if e["event"] == "finish"]
    images = sum(n_samples[e["device"]] * e["epochs"] for e in finishes)
    summary = json.loads((out / "summary.json").read_text())
    return {"jobs": len(finishes), "images": images, "wall_s": wall, "images_per_s": images / wall,
            "summary_wall_s": summary["wall_time_s"], "stderr": proc.stderr}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=200, help="jobs to train (aggregations = jobs / K)")
    p.add_argument("--arm", action="append", default=[], help="overrides of one more arm (space-separated)")
    p.add_argument("--small", action="store_true", help="500 + 100 images, model.width=0.125: a check of this script")
    args = p.parse_args(argv)
    arms = [""] + args.arm
    extra = ["model.width=0.125", "devices.num=10", "devices.concurrency=4", "algorithm.buffer_size=2", "runtime.device=cpu",
             "runtime.batch_jobs=1"] if args.small else []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_cifar(root, 500, 100) if args.small else write_cifar(root, 50_000, 10_000)
        print(f"{'arm':<44} {'jobs':>5} {'images':>9} {'wall s':>7} {'images/s':>9}  (run's own wall s)", flush=True)
        for i, arm in enumerate(arms):
            r = cli_run(root, root / f"run{i}", args.jobs, extra + arm.split())
            print(f"{arm or 'configs/cifar10_resnet18.yaml as it is':<44} {r['jobs']:>5} {r['images']:>9,} "
                  f"{r['wall_s']:>7.1f} {r['images_per_s']:>9,.0f}  ({r['summary_wall_s']:.1f})", flush=True)
            for line in r["stderr"].splitlines():
                if line.startswith("seafl: ") and "running" not in line:
                    print("   ", line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
