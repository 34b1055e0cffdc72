"""Local training of one job (SPEC "Local training"): E epochs of mini-batch SGD.

The model is a LightningModule: its ``training_step`` and ``configure_optimizers`` define
the loss and the optimiser. We drive them with a plain loop instead of ``Trainer.fit``:
a Trainer per job (thousands per run) costs more than the job itself for small models
(see benchmarks/local_training.py). Data order and augmentation come from the job's own
stream, so the same job gives the same bits on whichever rank runs it.

Choice: with batch_size > 1, a trailing mini-batch of a single sample is skipped when the
shard has more than one sample (batch norm cannot train on one sample). batch_size = 1 trains
sample by sample; the config refuses it for the batch-norm models (ResNet-18, VGG-16).
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

from seafl_dist.train.flat import flatten, load_flat


def _autocast(device: torch.device, precision: str):
    if precision == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def train_job(module, start: torch.Tensor, data, indices: torch.Tensor, *, epochs: int, batch_size: int,
              seed: int, augment: bool = False, device: torch.device | str = "cpu",
              precision: str = "32", on_step=None, result_device: torch.device | str = "cpu") -> torch.Tensor:
    """Train ``module`` from flat ``start`` on ``data[indices]``; return the trained flat vector
    (on ``result_device``: the CPU by default). ``start`` may live anywhere; it is moved to
    ``device`` in one copy.

    ``on_step()``, if given, is called after every optimiser step (a worker counts its progress)."""
    device = torch.device(device)
    module.to(device)
    load_flat(module, start.to(device))
    module.train()
    optimizer = module.configure_optimizers()
    gen = torch.Generator().manual_seed(seed)
    n = len(indices)
    for _epoch in range(epochs):
        order = indices[torch.randperm(n, generator=gen)]
        for step, lo in enumerate(range(0, n, batch_size)):
            idx = order[lo:lo + batch_size]
            if len(idx) == 1 and n > 1 and batch_size > 1:
                continue
            x, y = data.batch(idx, augment=augment, generator=gen, device=device)
            with _autocast(device, precision):
                loss = module.training_step((x, y), step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if on_step is not None:
                on_step()
    return flatten(module, result_device)


@torch.no_grad()
def evaluate(module, flat: torch.Tensor, data, *, batch_size: int = 1024, device: torch.device | str = "cpu",
             precision: str = "32") -> tuple[float, float]:
    """Accuracy and mean cross-entropy of the flat model on the whole dataset."""
    device = torch.device(device)
    load_flat(module, flat)
    # channels-last on a CPU: LeNet-5 evaluates 10,000 MNIST images in 0.29 s instead of 0.66 s
    # (1 thread; ResNet-18 and VGG-16 gain 1.3-1.5x). Not used on GPUs, where it has not been measured.
    fmt = torch.channels_last if device.type == "cpu" and getattr(module, "channels_last_eval", False) \
        else torch.contiguous_format
    module.to(device, memory_format=fmt).eval()
    correct, loss_sum, n = 0, 0.0, len(data)
    for lo in range(0, n, batch_size):
        idx = torch.arange(lo, min(lo + batch_size, n))
        x, y = data.batch(idx, device=device)
        x = x.contiguous(memory_format=fmt)
        with _autocast(device, precision):
            logits = module(x)
        loss_sum += float(torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum"))
        correct += int((logits.argmax(dim=1) == y).sum())
    return correct / n, loss_sum / n
