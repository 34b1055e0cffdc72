"""Local training of one job (SPEC "Local training"): E epochs of mini-batch SGD.

The model is a LightningModule (or the built-in models' plain ``FLNet``): the plain loop
(train/loop.py) trains it as ``Trainer.fit`` would, hooks, schedulers and ``self.log`` included,
without a Trainer: a Trainer per job (thousands per run) costs more than the job itself for small
models (see benchmarks/local_training.py). ``train.loop: lightning`` runs a real ``Trainer.fit``
per job (train/lightning_loop.py) on the same batches, to the same bits. The batches, their order and augmentation come from the
job's :class:`~seafl_dist.train.plan.StepPlan` (its own data-order stream); layers that draw
random numbers (Dropout, ...) draw from torch's generators seeded with the job's ``torch_seed``
(its own stream too) inside ``fork_rng``, so the caller's random state is left as it was. The
same job thus gives the same bits on whichever rank runs it, in whatever order, after a resume.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from functools import partial

import torch

from seafl_dist.train.flat import flatten, load_flat
from seafl_dist.train.loop import fit_job
from seafl_dist.train.plan import StepPlan


def _autocast(device: torch.device, precision: str, cache: bool = True):
    """bf16 autocast on a GPU (``cache=False`` inside a CUDA graph's capture, where a cast must be a
    kernel of the graph, not a tensor kept from an earlier call)."""
    if precision == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache)
    return nullcontext()


# oneDNN's x64 kernels for the weight gradient of a strided 1x1 convolution whose NHWC input has fewer
# channels than their channel block (8 on AVX2, 16 on AVX-512) write past their workspace: hangs,
# crashes, wrong gradients (uxlfoundation/oneDNN#6035, open for oneDNN 3.12 in torch 2.14; here
# ResNet-18 at width 0.125, 8-channel shortcut, aborts on 2 threads). Such a model trains NCHW on a CPU.
ONEDNN_1X1_BLOCK = 16


def narrow_strided_1x1(module) -> str | None:
    """The first convolution of ``module`` that oneDNN's bug above would meet when training channels-last
    on a CPU (its name), or None."""
    for name, m in module.named_modules():
        if (isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1) and m.stride != (1, 1)
                and m.in_channels // m.groups < ONEDNN_1X1_BLOCK):
            return name
    return None


def memory_format(module, device: torch.device, *, training: bool = True) -> torch.memory_format:
    """How a model's weights and images are laid out where it trains and evaluates: channels-last for
    a model that allows it (``channels_last``: the built-in models), otherwise as PyTorch makes them.
    On a GPU, cuDNN's NHWC kernels: ResNet-18's big-batch step 1.7x faster on an H200
    (docs/performance.md). On a CPU a job takes 1.07-1.13x (LeNet-5) to 1.2-1.26x (ResNet-18, VGG-16)
    less CPU on one thread (benchmarks/local_training.py), at other rounding than NCHW: numerics
    version 2 (seafl_dist/versions.py; version 1 trained NCHW on a CPU and evaluated channels-last).
    A model with a convolution that oneDNN's bug above meets trains NCHW on a CPU and evaluates
    channels-last (forward only: unaffected). A pure function of the model, the device type and
    ``training``, so every rank and every path of one run (the plain loop, ``train.loop: lightning``,
    graph slots, evaluation) lays it out alike."""
    if not getattr(module, "channels_last", False):
        return torch.contiguous_format
    if training and device.type == "cpu" and narrow_strided_1x1(module) is not None:
        return torch.contiguous_format
    return torch.channels_last


@contextmanager
def job_random_state(seed: int | None, device: torch.device):
    """torch's CPU generator (and ``device``'s, on a GPU) seeded with ``seed`` for the block, the
    caller's states restored after it. ``None``: the caller's generators are used as they are.
    Forking changes no arithmetic: a model that draws no random numbers trains to the same bits."""
    if seed is None:
        yield
        return
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.random.default_generator.manual_seed(seed)
        for index in cuda:
            torch.cuda.default_generators[index].manual_seed(seed)
        yield


class EpochBatches:
    """A job's batches, one epoch per iteration: iterating gives the next epoch's batches (drawn lazily
    from the job's :class:`StepPlan`, already on the device and laid out as the model trains), ``len``
    the batches of one epoch. An epoch left early (``on_train_batch_start`` returned -1) still uses up
    its draws, so the next epoch's batches are the ones the plan makes for it. Both loops (the plain
    one and ``lightning.Trainer.fit``, which takes any sized iterable) iterate the same object."""

    def __init__(self, plan: StepPlan, data, *, augment: bool, device: torch.device, fmt: torch.memory_format):
        self.plan, self.data, self.augment, self.device, self.fmt = plan, data, augment, device, fmt
        self._draws = plan.batches(data.augment_draws)
        self._left = 0  # batches of the epoch under way not drawn yet
        self._budget = plan.steps  # batches of the job not yet handed out (a step-counted job's last epoch is short)

    def __len__(self) -> int:
        return len(self.plan.bounds)

    def __iter__(self):
        for _ in range(self._left):  # the rest of an epoch that ended early
            next(self._draws)
        self._left = min(len(self), self._budget)
        self._budget -= self._left
        while self._left:
            self._left -= 1
            _, idx, draws = next(self._draws)
            batch = self.data.batch(idx, augment=self.augment, draws=draws, device=self.device)
            if self.fmt is torch.contiguous_format:  # any batch a dataset makes (a DataModule's collate: any structure)
                yield batch
            else:  # the built-in models' (images, labels), laid out as the model trains
                x, y = batch
                yield x.contiguous(memory_format=self.fmt), y


def train_job(module, start: torch.Tensor, data, indices: torch.Tensor, *, epochs: int, batch_size: int,
              seed: int, torch_seed: int | None = None, augment: bool = False, device: torch.device | str = "cpu",
              precision: str = "32", on_step=None, result_device: torch.device | str = "cpu", loop: str = "plain",
              clip: tuple = (None, None), logged: dict | None = None, prox_mu: float = 0.0,
              steps: int | None = None, control=None, dp_sgd=None, dp_seed: int | None = None) -> torch.Tensor:
    """Train ``module`` from flat ``start`` on ``data[indices]``; return the trained flat vector
    (on ``result_device``: the CPU by default). ``start`` may live anywhere; it is moved to
    ``device`` in one copy. ``seed`` draws the data order, ``torch_seed`` seeds the random layers
    (the runtime passes one per job; see :func:`job_random_state`).

    ``loop``: ``plain`` (train/loop.py: Lightning's semantics without a Trainer) or ``lightning`` (one
    ``lightning.Trainer.fit``, train/lightning_loop.py); both give the same bits on a CPU. ``clip``:
    (``train.grad_clip_val``, ``train.grad_clip_algorithm``). ``logged`` gets what the module logged,
    reduced over the job. ``prox_mu``: ``train.prox_mu``, FedProx's proximal term mu (w - start) added to
    every step's gradients before clipping (train/proximal.py; 0: today's step). ``steps``: a step-counted job
    (FedCompass's), which stops after that many steps, its last of ``epochs`` epochs cut short (train/plan.py;
    None: ``epochs`` whole epochs). ``control``: SCAFFOLD's correction c − c_i (train/controls.py), which counts the
    steps trained. ``dp_sgd``: the ``train.dp_sgd`` section when enabled (None: off), with ``dp_seed`` the job's
    noise stream: Poisson batches and Opacus's DP step (train/dp_sgd.py); ``logged`` then gets nothing (the module's
    logged values are not noised, so they never leave the device). ``on_step()``, if given, is
    called after every optimiser step (a worker counts its progress)."""
    device = torch.device(device)
    fmt = memory_format(module, device)
    module.to(device, memory_format=fmt)
    load_flat(module, start.to(device))
    module.train()
    plan = StepPlan(indices, epochs, batch_size, seed, augment, steps, poisson=dp_sgd is not None)
    batches = EpochBatches(plan, data, augment=augment, device=device, fmt=fmt)
    dp = None
    if dp_sgd is not None:
        from seafl_dist.train.dp_sgd import JobDP
        dp = JobDP(dp_sgd, seed=dp_seed, device=device, expected_batch_size=min(batch_size, len(indices)))
        logged = None  # what the module logs is computed from its records without noise: it stays on the device
    with job_random_state(torch_seed, device):
        if loop == "lightning":
            from seafl_dist.train.lightning_loop import fit_lightning
            fit_lightning(module, batches, epochs=epochs, device=device, precision=precision, clip=clip,
                          on_step=on_step, logged=logged, prox_mu=prox_mu, control=control, dp=dp)
        else:
            fit_job(module, batches, epochs=epochs, device=device, precision=precision, clip=clip,
                    autocast=partial(_autocast, device, precision), on_step=on_step, logged=logged, prox_mu=prox_mu,
                    control=control, dp=dp)
    return flatten(module, result_device)


@torch.no_grad()
def evaluate(module, flat: torch.Tensor, data, *, batch_size: int = 1024, device: torch.device | str = "cpu",
             precision: str = "32") -> tuple[float, float]:
    """Accuracy and mean cross-entropy of the flat model on the whole dataset. Out of GPU memory,
    the batches halve (one line says so) and stay that size for this model from then on."""
    device = torch.device(device)
    # as the model trains (channels-last on a CPU: LeNet-5 evaluates 10,000 MNIST images in 0.29 s
    # instead of 0.66 s on 1 thread; ResNet-18 and VGG-16 gain 1.3-1.5x)
    fmt = memory_format(module, device, training=False)
    load_flat(module, flat)
    module.to(device, memory_format=fmt).eval()
    return halving(module, batch_size, lambda size: _evaluate(module, data, size, device, precision, fmt))


def halving(module, batch_size: int, run):
    """``run(batch_size)``, its batches halved while the GPU runs out of memory (one line each time) and
    kept that size for ``module`` from then on: every evaluation, by the built-in rule or the module's own step."""
    batch_size = min(batch_size, getattr(module, "_seafl_eval_batch", batch_size))
    while True:
        try:
            return run(batch_size)
        except torch.cuda.OutOfMemoryError:
            if batch_size == 1:
                raise
        torch.cuda.empty_cache()  # outside the except: its traceback no longer holds the batch
        batch_size //= 2
        module._seafl_eval_batch = batch_size
        print(f"seafl: out of GPU memory evaluating; evaluating in batches of {batch_size} from now on",
              file=sys.stderr)


def _evaluate(module, data, batch_size: int, device: torch.device, precision: str, fmt) -> tuple[float, float]:
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
