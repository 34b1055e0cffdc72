"""CPU time of one device job of the CIFAR-10 study (500 images, E = 5, batch 32, crop + flip) per
candidate model, side by side, to choose the model a 2-core VM can run (docs/REPRODUCTION.md,
"What reproduces on CIFAR-10"):

    python benchmarks/cifar10_model_cost.py --data-root /work/data [--epochs 5] [--reps 3]

Process CPU time (not wall time, which the VM's other users inflate), one thread, the median of
``--reps`` jobs after one warm-up job, and its ratio to LeNet-5's.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from seafl_dist.data import load_dataset
from seafl_dist.models import build_model
from seafl_dist.settings import TrainConfig
from seafl_dist.train.flat import flatten
from seafl_dist.train.local import train_job

CANDIDATES = [("lenet5", 1.0), ("resnet18", 0.125), ("resnet18", 0.25)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    train = load_dataset("cifar10", args.data_root, train=True)
    shard = torch.arange(500)
    optim = TrainConfig(lr=0.01, momentum=0.9, weight_decay=5e-4, batch_size=32)
    base = None
    for name, width in CANDIDATES:
        torch.manual_seed(0)
        model = build_model(name, 10, 3, width=width, image_size=32, optim=optim, lightning=False)
        flat = flatten(model)
        times = []
        for rep in range(args.reps + 1):
            t0 = time.process_time()
            train_job(model, flat, train, shard, epochs=args.epochs, batch_size=32, seed=rep, augment=True)
            times.append(time.process_time() - t0)
        cpu = statistics.median(times[1:])
        base = base or cpu
        print(f"{name:9s} width {width:<5g} {flat.numel():>10,} parameters  {cpu:6.2f} CPU s a job  "
              f"{cpu / base:5.2f}x lenet5", flush=True)


if __name__ == "__main__":
    main()
