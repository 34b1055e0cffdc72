"""What record-level DP-SGD (``train.dp_sgd``, train/dp_sgd.py, Opacus) costs a local step on the CPU (issue 67, 6).

    python benchmarks/dp_sgd_cost.py [--threads 1] [--reps 5] [--samples 256] [--resnet-width 1.0] [--models ...]

For LeNet-5 (28x28x1) and ResNet-18 (32x32x3, its BatchNorm replaced by GroupNorm as ``train.dp_sgd.fix_modules``
does, for the plain step too) it trains the same job (``--samples`` random images, batch 32, E = 1, SGD lr 0.01
momentum 0.9, as ``train_job`` trains every simulated job) plainly and under DP-SGD (C = 1, σ = 1, Poisson batches
of expected size 32) in each of Opacus's per-sample gradient modes, interleaved, ``--reps`` times after a warm-up,
and prints the median CPU time per optimiser step and its ratio to the plain step (the aim for LeNet-5: at most 3x).

Modes (opacus/grad_sample/utils.py): ``hooks`` and ``functorch`` are what ``train_job`` runs (GradSampleHooks on the
job's own module). ``ew`` (torch's expanded weights, GradSampleModuleExpandedWeights) needs the model's forward
called through Opacus's wrapper, which a LightningModule's own ``training_step`` does not do: it is timed here in a
hand-written loop of the same steps (wrapper forward, cross-entropy, DPOptimizer step; NCHW, since torch's
expanded-weights convolution fails on channels-last gradients: "view size is not compatible") so its cost is on the table,
and is not a ``train.dp_sgd.grad_sample_mode``. ``ghost`` (fast gradient clipping) needs a second backward through
Opacus's own loss wrapper: not timed. CPU seconds of this process, not wall time.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from seafl_dist.data import ArrayDataset
from seafl_dist.models import build_model
from seafl_dist.settings import TrainConfig
from seafl_dist.settings.dp_sgd import DPSGDConfig
from seafl_dist.train import StepPlan, flatten, load_flat, train_job
from seafl_dist.train.dp_sgd import fix_model

MODELS = {"LeNet-5": ("lenet5", 1, 28), "ResNet-18 (GroupNorm)": ("resnet18", 3, 32)}
BATCH = 32


def images(n: int, channels: int, size: int) -> ArrayDataset:
    g = torch.Generator().manual_seed(0)
    return ArrayDataset(torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10, "random", (0.5,) * channels, (0.25,) * channels)


def ew_job(net, start, data, idx) -> torch.Tensor:
    """The same job's steps with Opacus's expanded-weights module: the wrapper's forward, its DPOptimizer."""
    from opacus.grad_sample.gsm_exp_weights import GradSampleModuleExpandedWeights
    from opacus.optimizers import DPOptimizer
    net.to(memory_format=torch.contiguous_format)  # torch's expanded-weights conv fails on channels-last grads
    load_flat(net, start)
    net.train()
    for m in net.modules():
        if getattr(m, "inplace", False):
            m.inplace = False
    gsm = GradSampleModuleExpandedWeights(net, loss_reduction="mean")
    opt = DPOptimizer(torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9), noise_multiplier=1.0,
                      max_grad_norm=1.0, expected_batch_size=BATCH, generator=torch.Generator().manual_seed(1))
    for _, rows, _ in StepPlan(idx, 1, BATCH, 0, poisson=True).batches():
        x, y = data.batch(rows)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(gsm(x.contiguous()), y).backward()
        opt.step()
    for m in net.modules():
        if hasattr(m, "inplace"):
            m.inplace = True
    return flatten(net)


def job_seconds(mode: str, net, start, data, idx) -> float:
    t0 = time.process_time()
    if mode == "ew":
        ew_job(net, start, data, idx)
    else:
        dp = None if mode == "plain" else DPSGDConfig(enabled=True, clip=1.0, noise_multiplier=1.0,
                                                       grad_sample_mode=mode)
        train_job(net, start, data, idx, epochs=1, batch_size=BATCH, seed=0, dp_sgd=dp, dp_seed=1)
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--resnet-width", type=float, default=1.0)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--modes", nargs="+", default=["hooks", "functorch", "ew"])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    optim = TrainConfig(lr=0.01, momentum=0.9)
    modes = ["plain", *args.modes]
    print("| model (trainable parameters) | plain step | " + " | ".join(f"DP-SGD {m}" for m in args.modes)
          + " |\n|---|---|" + "---|" * len(args.modes))
    for label in args.models:
        name, channels, size = MODELS[label]
        width = args.resnet_width if name == "resnet18" else 1.0
        net = build_model(name, 10, channels, width=width, image_size=size, lightning=False, optim=optim)
        fix_model(net)  # ResNet-18: BatchNorm -> GroupNorm (LeNet-5 has nothing to fix)
        start = flatten(net)
        data, idx = images(args.samples, channels, size), torch.arange(args.samples)
        steps = StepPlan(idx, 1, BATCH, 0).steps
        times: dict[str, list[float]] = {m: [] for m in modes}
        for rep in range(args.reps + 1):  # rep 0 warms up; the order rotates so drift hurts all alike
            for m in modes[rep % len(modes):] + modes[:rep % len(modes)]:
                t = job_seconds(m, net, start, data, idx)
                if rep:
                    times[m].append(t / steps)
        med = {m: statistics.median(v) for m, v in times.items()}
        n = sum(p.numel() for p in net.parameters() if p.requires_grad)
        label = label if width == 1.0 else f"{label} width {width:g}"
        cells = " | ".join(f"{med[m] * 1e3:.1f} ms ({med[m] / med['plain']:.2f}x)" for m in args.modes)
        print(f"| {label} ({n:,}) | {med['plain'] * 1e3:.1f} ms | {cells} |", flush=True)
    print(f"\n{args.reps} jobs of {steps} steps (batch {BATCH}; DP-SGD: Poisson, expected {BATCH}) each, median CPU "
          f"time per step and its ratio to the plain step, {args.threads} thread(s), torch {torch.__version__}")


if __name__ == "__main__":
    main()
