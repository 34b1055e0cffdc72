"""What a checkpoint costs: its size and the time to write (atomically, fsynced) and read it.

    python benchmarks/checkpoint.py [--dir DIR] [--versions 1,11] [--iters 3]

A checkpoint holds every model version still referenced: the global model and the versions
in-flight jobs started from. With staleness limit beta at most beta + 1 versions are live
(SEAFL's default beta = 10: 11); FedBuff/FedAsync (beta = inf) can hold more. For LeNet-5 (MNIST
shape) and ResNet-18 (CIFAR-10 shape, width 1, ~45 MB flat) and each count of versions, this
times, in one run, :func:`seafl_dist.runtime.checkpoint.save` (temp file, fsync, rename, dir
fsync), the full ``torch.load(weights_only=True)`` rank 0 does on resume, and the mmap'd read
every rank does to check a checkpoint before starting. Medians over ``--iters``. A script, not a
test; docs/clusters.md ("Checkpoints") quotes its output.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from seafl_dist.settings import Config, dump_config
from seafl_dist.models import build_model
from seafl_dist.runtime import checkpoint
from seafl_dist.train import flatten

MODELS = {"lenet5": dict(num_classes=10, in_channels=1, image_size=28),
          "resnet18": dict(num_classes=10, in_channels=3, image_size=32)}


def timed(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def state_of(flat: torch.Tensor, n_versions: int) -> dict:
    rows = [{"version": v, "time": float(v), "accuracy": 0.5, "loss": 1.0, "updates": 10, "mean_staleness": 1.0,
             "max_staleness": 3, "notifications": 0, "rejected": 0} for v in range(1000)]
    return {"config": dump_config(Config()), "version": 1000, "time": 1000.0,
            "versions": {1000 - i: flat + i for i in range(n_versions)}, "refs": {1000 - i: 1 for i in range(n_versions)},
            "rows": rows, "staleness": [1] * 10000, "counts": {"aggregate": 1000}, "events_bytes": 0,
            "metrics_bytes": 0, "wall_s": 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="where to write (default: a temp dir; pick the run dir's file system)")
    ap.add_argument("--versions", default="1,11", help="model versions per checkpoint (comma-separated)")
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        out = Path(tmp)
        print(f"{'model':<9} {'versions':>8} {'size MB':>8} {'save s':>7} {'load s':>7} {'check s':>8}")
        for name, shape in MODELS.items():
            torch.manual_seed(0)
            flat = flatten(build_model(name, **shape))
            for n in (int(v) for v in args.versions.split(",")):
                state = state_of(flat, n)
                save_s = timed(lambda: checkpoint.save(out, state), args.iters)
                path = checkpoint.checkpoints(out)[-1]
                load_s = timed(lambda: torch.load(path, map_location="cpu", weights_only=True), args.iters)
                check_s = timed(lambda: torch.load(path, map_location="cpu", weights_only=True, mmap=True), args.iters)
                print(f"{name:<9} {n:>8} {path.stat().st_size / 1e6:>8.1f} {save_s:>7.3f} {load_s:>7.3f} {check_s:>8.3f}")
                checkpoint.remove_all(out)


if __name__ == "__main__":
    main()
