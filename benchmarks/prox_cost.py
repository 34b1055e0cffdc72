"""What FedProx's proximal term (``train.prox_mu``, train/proximal.py) costs a local step on the CPU (issue 66, 7).

    python benchmarks/prox_cost.py [--threads 1] [--reps 7] [--samples 256] [--resnet-width 1.0]

For LeNet-5 (28x28x1) and ResNet-18 (32x32x3, ``--resnet-width``) it trains the same job (``--samples`` random
images, batch 32, E = 1, SGD lr 0.01 momentum 0.9, as ``train_job`` trains every simulated job) with
``prox_mu`` = 0 (the plain step) and 0.01, interleaved, ``--reps`` times after a warm-up, and prints side by side
the median CPU time per optimiser step of each and their ratio (the aim: at most 1.15x). The per-job cost of the
term (one copy of the trainable parameters as w_base) is inside the timing: a job is what a device runs. CPU
seconds of this process, not wall time: they hardly move when other processes share the cores.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from seafl_dist.data import ArrayDataset
from seafl_dist.models import build_model
from seafl_dist.settings import TrainConfig
from seafl_dist.train import StepPlan, flatten, train_job

MODELS = {"LeNet-5": ("lenet5", 1, 28), "ResNet-18": ("resnet18", 3, 32)}
BATCH, MU = 32, 0.01


def images(n: int, channels: int, size: int) -> ArrayDataset:
    g = torch.Generator().manual_seed(0)
    return ArrayDataset(torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10, "random", (0.5,) * channels, (0.25,) * channels)


def job_seconds(net, start, data, idx, mu: float) -> tuple[float, torch.Tensor]:
    t0 = time.process_time()
    out = train_job(net, start, data, idx, epochs=1, batch_size=BATCH, seed=0, prox_mu=mu)
    return time.process_time() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--resnet-width", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    optim = TrainConfig(lr=0.01, momentum=0.9)
    print(f"| model (trainable parameters) | plain step | step with prox_mu={MU} | ratio |\n|---|---|---|---|")
    for label, (name, channels, size) in MODELS.items():
        width = args.resnet_width if name == "resnet18" else 1.0
        net = build_model(name, 10, channels, width=width, image_size=size, lightning=False, optim=optim)
        start = flatten(net)
        data, idx = images(args.samples, channels, size), torch.arange(args.samples)
        steps = StepPlan(idx, 1, BATCH, 0).steps
        times: dict[float, list[float]] = {0.0: [], MU: []}
        outs = {}
        for rep in range(args.reps + 1):  # rep 0 warms up; the order alternates so drift hurts both alike
            for mu in ((0.0, MU) if rep % 2 else (MU, 0.0)):
                t, outs[mu] = job_seconds(net, start, data, idx, mu)
                if rep:
                    times[mu].append(t / steps)
        assert not torch.equal(outs[0.0], outs[MU])  # the term did run
        plain, prox = statistics.median(times[0.0]), statistics.median(times[MU])
        n = sum(p.numel() for p in net.parameters() if p.requires_grad)
        label = label if width == 1.0 else f"{label} width {width:g}"
        print(f"| {label} ({n:,}) | {plain * 1e3:.1f} ms | {prox * 1e3:.1f} ms | {prox / plain:.3f}x |")
    print(f"\n{args.reps} jobs of {steps} steps (batch {BATCH}) each, median CPU time per step, "
          f"{args.threads} thread(s), torch {torch.__version__}")


if __name__ == "__main__":
    main()
