"""Per-job cost of local training: our loop vs a bare PyTorch loop vs one ``Trainer.fit`` per job.

    python benchmarks/local_training.py                 # LeNet-5, 600 digits samples, 5 epochs
    python benchmarks/local_training.py --reps 11 --threads 1

One job = load the global model, E epochs of mini-batch SGD (batch 32, lr 0.01, momentum 0.9)
over 600 samples in a job-seeded order, return the trained weights. Three ways to run it:

(a) bare: a plain ``nn.Module`` with LeNet-5's layers, a hand-written loop (forward,
    cross-entropy, zero_grad, backward, step) over the same batches;
(b) ours: ``seafl_dist.train.train_job`` driving the LightningModule's ``training_step`` and
    ``configure_optimizers`` (what every simulated job runs);
(c) trainer: a fresh ``lightning.Trainer`` and ``fit`` per job (no logger, no checkpoints, no
    progress bar, no model summary), fed the same batches by an iterable dataset.

(a) and (b) must give bit-identical weights (checked): they do the same arithmetic, so the
ratio (b)/(a) is pure framework overhead (target <= 1.10). The three are run interleaved (in
rotating order), ``--reps`` times after a warm-up, and the medians compared, so a noisy machine
hurts all three alike. CPU time and the number of Python calls per job are printed too: they
hardly move when other processes share the cores.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from seafl_dist.settings import TrainConfig
from seafl_dist.data import load_dataset
from seafl_dist.models import build_model
from seafl_dist.train import flatten, load_flat, train_job


def bare_lenet(module: nn.Module) -> nn.Module:
    """A plain nn.Module with the LightningModule's layers (fresh copies, same shapes and order)."""
    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = copy.deepcopy(module.features)
            self.classifier = copy.deepcopy(module.classifier)

        def forward(self, x):
            return self.classifier(self.features(x))
    return Bare()


def job_batches(data, indices, *, epochs, batch_size, seed):
    """The batches train_job draws: a fresh permutation per epoch from the job's generator."""
    gen = torch.Generator().manual_seed(seed)
    n = len(indices)
    for _ in range(epochs):
        order = indices[torch.randperm(n, generator=gen)]
        for lo in range(0, n, batch_size):
            idx = order[lo:lo + batch_size]
            if len(idx) == 1 and n > 1:
                continue
            yield data.batch(idx)


# ---- (a) bare PyTorch ---------------------------------------------------------------------

def run_bare(model: nn.Module, start, data, indices, cfg: TrainConfig, epochs, seed):
    load_flat(model, start)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    for x, y in job_batches(data, indices, epochs=epochs, batch_size=cfg.batch_size, seed=seed):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return flatten(model)


# ---- (b) ours ---------------------------------------------------------------------------

def run_ours(module, start, data, indices, cfg: TrainConfig, epochs, seed):
    return train_job(module, start, data, indices, epochs=epochs, batch_size=cfg.batch_size, seed=seed)


# ---- (c) one Trainer.fit per job -----------------------------------------------------------

class _JobBatches(torch.utils.data.IterableDataset):
    """Yields train_job's batches epoch after epoch (the generator carries over between epochs)."""

    def __init__(self, data, indices, batch_size, seed):
        self.data, self.indices, self.batch_size = data, indices, batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        n = len(self.indices)
        order = self.indices[torch.randperm(n, generator=self.gen)]
        for lo in range(0, n, self.batch_size):
            idx = order[lo:lo + self.batch_size]
            if len(idx) == 1 and n > 1:
                continue
            yield self.data.batch(idx)


def run_trainer(module, start, data, indices, cfg: TrainConfig, epochs, seed):
    import lightning as L

    load_flat(module, start)
    loader = torch.utils.data.DataLoader(_JobBatches(data, indices, cfg.batch_size, seed), batch_size=None)
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)
    trainer.fit(module, train_dataloaders=loader)
    return flatten(module)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions of each variant (interleaved)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--no-trainer", action="store_true", help="skip (c), the slow one")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # Lightning's advice about dataloader workers etc.
    import logging
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    data = load_dataset("digits")
    indices = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:args.samples]
    cfg = TrainConfig(batch_size=args.batch_size, lr=0.01, momentum=0.9)
    torch.manual_seed(0)
    module = build_model("lenet5", data.num_classes, data.in_channels, image_size=data.image_size, optim=cfg)
    bare = bare_lenet(module)
    start = flatten(module)
    steps = args.epochs * sum(1 for lo in range(0, args.samples, args.batch_size)
                              if args.samples - lo > 1 or args.samples == 1)

    variants = {"bare": (run_bare, bare), "ours": (run_ours, module)}
    if not args.no_trainer:  # its own instance: fit leaves the Trainer attached (self.log would fire in (b))
        variants["trainer"] = (run_trainer, copy.deepcopy(module))

    # same arithmetic check: (a) and (b) give the same bits
    wa = run_bare(bare, start, data, indices, cfg, args.epochs, 1)
    wb = run_ours(module, start, data, indices, cfg, args.epochs, 1)
    same = torch.equal(wa, wb)

    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    names = list(variants)
    for rep in range(args.reps + 1):  # rep 0 is the warm-up; the order rotates so no variant always goes first
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            fn, model = variants[name]
            t0, c0 = time.perf_counter(), time.process_time()
            fn(model, start, data, indices, cfg, args.epochs, 100 + rep)
            if rep:
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)

    print(f"LeNet-5, {args.samples} digits samples (28x28x1), {args.epochs} epochs, batch {args.batch_size}: "
          f"{steps} SGD steps per job; torch threads {torch.get_num_threads()}; median of {args.reps} interleaved reps")
    print("  wall time is what a run waits; CPU time (this process) is steadier on a shared machine")
    for name, label in (("bare", "(a) bare PyTorch loop"), ("ours", "(b) seafl_dist train_job"),
                        ("trainer", "(c) Trainer.fit per job")):
        if name in wall:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"  {label:26s} wall {w:7.3f} s/job ({1e3 * w / steps:5.2f} ms/step, range "
                  f"{min(wall[name]):.3f}..{max(wall[name]):.3f})   cpu {c:7.3f} s/job")
    for name, tag in (("ours", "(b)/(a)"), ("trainer", "(c)/(a)")):
        if name in wall:
            rw = statistics.median(wall[name]) / statistics.median(wall["bare"])
            rc = statistics.median(cpu[name]) / statistics.median(cpu["bare"])
            # the ratio of medians of paired ratios is robust to slow phases that hit one rep
            rp = statistics.median(x / y for x, y in zip(wall[name], wall["bare"]))
            target = "   (target <= 1.10)" if name == "ours" else ""
            print(f"  {tag} = {rw:.3f} wall, {rc:.3f} cpu, {rp:.3f} median of paired wall ratios{target}")
    print(f"  (a) and (b) weights bit-identical: {same}")
    # load-independent: Python-level work per job (Lightning's overhead is Python calls around each step)
    calls = {name: python_calls(fn, model, start, data, indices, cfg, args.epochs) for name, (fn, model) in variants.items()}
    print("  Python function calls per job: " + ", ".join(f"{k} {v:,} ({v / steps:.0f}/step)" for k, v in calls.items()))


def python_calls(fn, model, start, data, indices, cfg, epochs) -> int:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn, model, start, data, indices, cfg, epochs, 0)
    return pstats.Stats(prof).total_calls

if __name__ == "__main__":
    main()
