"""Centralized accuracy of a model on CIFAR-10 with the federated runs' own local training: the whole
training set as one shard, trained by the same ``train_job`` (same SGD, batch size, crop + flip
augmentation, channels-last on a CPU) one epoch at a time, the test set evaluated after each epoch.
It is the ceiling that the CIFAR-10 study's second target is set from (docs/REPRODUCTION.md,
"What reproduces on CIFAR-10"):

    python benchmarks/cifar10_centralized.py --data-root /work/data --epochs 10 [--model lenet5] [--width 1]

Prints, per epoch, test accuracy and loss and training images per second of this process.
"""
from __future__ import annotations

import argparse
import time

import torch

from seafl_dist.data import load_dataset
from seafl_dist.models import build_model
from seafl_dist.train.flat import flatten
from seafl_dist.train.local import evaluate, train_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train = load_dataset("cifar10", args.data_root, train=True)
    test = load_dataset("cifar10", args.data_root, train=False)
    torch.manual_seed(args.seed)
    from seafl_dist.settings import TrainConfig
    optim = TrainConfig(lr=args.lr, momentum=0.9, weight_decay=5e-4, batch_size=args.batch_size)
    model = build_model(args.model, 10, 3, width=args.width, image_size=32, optim=optim, lightning=False)
    flat, everything = flatten(model), torch.arange(len(train))
    print(f"{args.model} width {args.width}: {flat.numel():,} parameters; SGD lr {args.lr}, momentum 0.9, "
          f"weight decay 5e-4, batch {args.batch_size}, crop + flip")
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        flat = train_job(model, flat, train, everything, epochs=1, batch_size=args.batch_size,
                         seed=args.seed * 1000 + epoch, augment=True)
        took = time.perf_counter() - t0
        acc, loss = evaluate(model, flat, test)
        print(f"epoch {epoch:3d}  test accuracy {acc:.4f}  loss {loss:.4f}  {len(train) / took:,.0f} images/s",
              flush=True)


if __name__ == "__main__":
    main()
