"""Per-job cost of local training: the plain loop, ``train.loop: lightning``, a bare loop, and the code before.

    python benchmarks/local_training.py --threads 1 --reps 11                  # LeNet-5, 600 digits samples, E = 5
    python benchmarks/local_training.py --threads 1 --model resnet18 --width 0.25 --samples 256 --epochs 2
    python benchmarks/local_training.py --threads 1 --no-lightning --before ac12a98   # channels-last on a CPU, alone
    python benchmarks/local_training.py --device cuda --model resnet18 --samples 600   # on a GPU (digits images)

One job = load the global model, E epochs of mini-batch SGD (batch 32, lr 0.01, momentum 0.9) over
the samples in a job-seeded order, return the trained weights. Variants, run interleaved (rotating
order, ``--reps`` times after a warm-up) so a noisy machine hurts all alike; medians compared:

  bare       a plain nn.Module with the model's layers and a hand-written loop over the same batches, laid
             out as train_job lays the model out (channels-last where it may: train/local.py's memory_format)
  plain      ``train_job`` (train/loop.py) on the built-in model: what every simulated job runs
  nchw       ``train_job`` on the model with ``channels_last = False``: the layout numerics version 1 trained
             in on a CPU, with today's code (plain / nchw: the channels-last gain alone)
  before     ``train_job`` as it was at ``--before`` (a git revision; default: the commit before the
             plain loop learnt Lightning's hooks), loaded from git beside today's code
  lightning  ``train_job(..., loop="lightning")``: one ``lightning.Trainer.fit`` per job (on a GPU its
             teardown moves the model to the CPU, and the next job moves it back)
  logs       ``train_job`` on a user LightningModule that overrides a hook and logs its loss every
             step (the stand-in Trainer and the log reduction at work); ``logs-lightning``: the same
             module under ``train.loop: lightning``

bare, plain and lightning give the same weights (checked and printed); nchw, and before where it
is another numerics version (``--before`` older than numerics version 2), give other rounding: their
relative L2 distance to plain is printed instead. CPU seconds of this process are printed beside the
wall time: they hardly move when other processes share the cores.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from seafl_dist.data import load_dataset
from seafl_dist.models import MODELS, build_model
from seafl_dist.models.base import lightning_class
from seafl_dist.settings import TrainConfig
from seafl_dist.train import flatten, load_flat, train_job
from seafl_dist.train.local import memory_format
from seafl_dist.train.plan import StepPlan

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "6825129"  # the last commit whose train_job knew no hooks (issue "LightningModules as ... writes them")


def old_train_job(rev: str):
    """``train_job`` of ``seafl_dist/train/local.py`` at git revision ``rev`` (it imports today's flat and plan
    modules, which that revision shares), or None when git or the revision is not there."""
    try:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:seafl_dist/train/local.py"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "local_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("local_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.train_job


def bare_copy(module: nn.Module) -> nn.Module:
    """A plain nn.Module holding the model's layers (its own copies) and its forward."""
    bare = nn.Module()
    for name, child in module.named_children():
        bare.add_module(name, child)
    bare = copy.deepcopy(bare)
    bare.forward = type(module).forward.__get__(bare)
    return bare


def run_bare(model, start, data, indices, cfg, epochs, seed, device, fmt):
    model.to(memory_format=fmt)
    load_flat(model, start.to(device))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    for _, idx, _ in StepPlan(indices, epochs, cfg.batch_size, seed).batches():
        x, y = data.batch(idx, device=device)
        loss = F.cross_entropy(model(x.contiguous(memory_format=fmt)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return flatten(model)


def variants(args, data, cfg, device):
    """{name: (function(model, start, seed) -> flat, model)}."""
    def built(lightning: bool = False, cls=None):
        torch.manual_seed(0)
        if cls is not None:
            return cls(data.num_classes, data.in_channels, width=args.width, image_size=data.image_size,
                       optim=cfg).to(device)
        return build_model(args.model, data.num_classes, data.in_channels, width=args.width,
                           image_size=data.image_size, optim=cfg, lightning=lightning).to(device)

    def job(fn, **kw):
        return lambda model, start, seed: fn(model, start, data, indices, epochs=args.epochs,
                                             batch_size=cfg.batch_size, seed=seed, device=device, **kw)

    class Logs(lightning_class(MODELS[args.model])):  # a hook of its own: the stand-in Trainer, self.log each step
        def on_train_epoch_start(self):
            pass

    indices = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:args.samples]
    fmt = memory_format(built(), device)
    nchw = built()
    nchw.channels_last = False
    out = {"bare": (lambda model, start, seed: run_bare(model, start, data, indices, cfg, args.epochs, seed, device,
                                                        fmt), bare_copy(built())),
           "plain": (job(train_job), built()),
           "nchw": (job(train_job), nchw)}
    before = old_train_job(args.before)
    if before is not None:
        out["before"] = (job(before), built())
    else:
        print(f"(no git revision {args.before} here: 'before' skipped)", file=sys.stderr)
    if not args.no_lightning:
        out["lightning"] = (job(train_job, loop="lightning"), built(lightning=True))
    out["logs"] = (job(train_job), built(lightning=True, cls=Logs))
    if not args.no_lightning:
        out["logs-lightning"] = (job(train_job, loop="lightning"), built(lightning=True, cls=Logs))
    return out, indices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="lenet5", choices=("lenet5", "resnet18", "vgg16"))
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--reps", type=int, default=11, help="timed repetitions of each variant (interleaved)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--before", default=BEFORE, help="git revision whose train_job is 'before'")
    ap.add_argument("--no-lightning", action="store_true", help="skip the Trainer.fit variants (slow)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    data = load_dataset("digits")  # bundled: 1,437 training images of 28x28x1
    cfg = TrainConfig(batch_size=args.batch_size, lr=0.01, momentum=0.9)
    runs, indices = variants(args, data, cfg, device)
    start = flatten(runs["plain"][1])
    steps = StepPlan(indices, args.epochs, cfg.batch_size, 0).steps

    results = {name: fn(model, start, 1) for name, (fn, model) in runs.items()}  # also the warm-up
    same = {name: torch.equal(results[name], results["plain"]) for name in ("bare", "before", "lightning", "nchw")
            if name in results}
    start_moved = float((results["plain"] - start).norm())
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    names = list(runs)
    for rep in range(args.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            fn, model = runs[name]
            if cuda:
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            fn(model, start, 100 + rep)
            if cuda:
                torch.cuda.synchronize()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)

    where = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} torch thread(s)"
    print(f"{args.model} (width {args.width:g}), {args.samples} {data.name} samples, {args.epochs} epochs, batch "
          f"{cfg.batch_size}: {steps} steps a job; {where}; median of {args.reps} interleaved reps")
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:15s} wall {w:8.4f} s/job ({1e3 * w / steps:6.2f} ms/step)   cpu {c:8.4f} s/job   "
              f"wall / plain {w / statistics.median(wall['plain']):.3f}   cpu / plain "
              f"{c / statistics.median(cpu['plain']):.3f}")
    if "before" in cpu:  # the cost target of the plain loop: within 2% of the code before it, in its layout
        for name, what in (("plain", "a job now against then"), ("nchw", "the loop alone, both NCHW; target <= 1.02")):
            paired = statistics.median(p / b for p, b in zip(cpu[name], cpu["before"]))
            print(f"  {name} / before, CPU seconds: {statistics.median(cpu[name]) / statistics.median(cpu['before']):.3f}"
                  f" (median of paired ratios {paired:.3f}; {what})")
    fmt = memory_format(runs["plain"][1], device)
    print(f"  channels-last gain alone (today's train_job, plain's layout {fmt}): nchw / plain CPU seconds "
          f"{statistics.median(cpu['nchw']) / statistics.median(cpu['plain']):.3f} (median of paired ratios "
          f"{statistics.median(n / p for n, p in zip(cpu['nchw'], cpu['plain'])):.3f})")
    print("  weights equal to plain's, bit for bit: " + ", ".join(f"{k} {v}" for k, v in same.items()))
    for name in (k for k, v in same.items() if not v):
        dist = float((results[name] - results["plain"]).norm()) / start_moved
        print(f"  {name}: other rounding, |{name} - plain| / |plain - start| = {dist:.1e}")


if __name__ == "__main__":
    main()
