"""Local training of many jobs at once (``runtime.batch_jobs`` = G > 1): one rank, G simulated devices.

A job's batch-32 step is launch-bound on a GPU (the device idles most of the time), so G jobs'
steps are fused into one with PyTorch's "model ensembling" recipe: the G models' parameters and
buffers are stacked along a new leading dimension and ``vmap(grad(loss))`` over
``functional_call`` computes every job's gradient in one pass (a convolution becomes a grouped
convolution). Every job keeps its own math, exactly as :func:`~seafl_dist.train.local.train_job`
does it alone, because the pieces are the same ones:

- its :class:`~seafl_dist.train.plan.StepPlan` (shard, batch order, augmentation, trailing-batch
  rule, epochs: SEAFL² partial jobs train fewer), so the batches are the same tensors;
- the optimiser the model's own ``configure_optimizers`` builds (``torch.optim.SGD``): its
  hyperparameters and torch's SGD function (``torch.optim.sgd.sgd``), applied to the stacked
  trainable parameters; a frozen parameter (``requires_grad=False``) is passed with the buffers,
  never differentiated, never updated, as the optimiser leaves it alone;
- its own batch-norm running statistics: the buffers are stacked too, and batch norm updates
  each job's slice inside ``vmap``;
- flat vectors in and out through train/flat.py (:meth:`FlatLayout.split`, :func:`join`).
- ``train.prox_mu`` > 0: FedProx's term mu (w - w_base) added to each row's gradients before SGD,
  w_base the row's start (train/proximal.py's formula, on the stacked rows); at 0 nothing is kept.

Jobs with different step counts or a different last-batch size: at each step the jobs still
training are grouped by this step's batch size, and each group takes one fused step (the full
stack in place when every job is in it, otherwise on gathered rows written back). A job that has
finished leaves the stack, so the remaining ones again step without gathers. No job's result
depends on the others; it differs from the job trained alone only by floating-point rounding
(grouped vs single convolutions): the tests hold it to a relative L2 difference <= 1e-4 in fp32.

What the fused step cannot train exactly is found before training (:func:`fusion_blocker`) and
trained one job at a time with ``train_job``: a model with its own loss or optimiser, layers that
draw random numbers (each job alone draws from its own seeded stream; fused, vmap would refuse
or share the draws), batch norm with ``momentum=None`` (a cumulative average vmap cannot
update), and anything else ``vmap`` rejects (found by one fused step on copies, on two samples).
"""
from __future__ import annotations

import weakref
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.sgd import sgd

from seafl_dist.models.contract import overridden
from seafl_dist.train.flat import FlatLayout, flatten, join
from seafl_dist.train.local import _autocast, train_job
from seafl_dist.train.plan import StepPlan, epoch_sizes
from seafl_dist.train.proximal import add_proximal

__all__ = ["FusedStep", "batchable", "epoch_sizes", "fusion_blocker", "train_jobs"]

SGD_KEYS = ("weight_decay", "momentum", "lr", "dampening", "nesterov", "maximize", "foreach", "fused")
_BLOCKERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> {(device, precision): reason}


def batchable(module) -> bool:
    """Whether ``module`` trains with the base loss and optimiser (then jobs may be fused)."""
    from seafl_dist.models.base import FLNet
    cls = type(module)
    return (isinstance(module, FLNet) and cls.training_step is FLNet.training_step
            and cls.configure_optimizers is FLNet.configure_optimizers)


def fusion_blocker(module, data, device: torch.device | str = "cpu", precision: str = "32") -> str | None:
    """Why the fused step cannot train ``module``'s jobs exactly as each alone, or None. Checked
    once per module, device and precision, before training (a probe step on ``data``'s first rows)."""
    cache = _BLOCKERS.setdefault(module, {})
    key = (str(device), precision)
    if key not in cache:
        cache[key] = _find_blocker(module, data, torch.device(device), precision)
    return cache[key]


def shared_blocker(module, cumulative_bn: str) -> str | None:
    """Why ``module``'s jobs cannot be trained by a step other than its own (the fused step here, a
    CUDA graph in train/graphed.py): its own loss or optimiser, random layers, batch norm's
    cumulative average (``cumulative_bn`` says why that one), an optimiser other than one SGD group, a
    Lightning hook of its own (models/contract.py: the plain loop calls it, a fused step or graph could not)."""
    if not batchable(module):
        return "it defines its own training_step or configure_optimizers"
    hooks = overridden(module)
    if hooks:
        return f"it overrides Lightning's {', '.join(sorted(hooks))}, which only a job's own loop runs"
    for name, layer in module.named_modules():
        if isinstance(layer, (nn.modules.dropout._DropoutNd, nn.RReLU)):
            return f"its layer {name} ({type(layer).__name__}) draws random numbers"
        if isinstance(layer, nn.modules.batchnorm._NormBase) and layer.track_running_stats and layer.momentum is None:
            return f"its batch norm {name} has momentum=None ({cumulative_bn})"
    optimizer = module.configure_optimizers()
    if type(optimizer) is not torch.optim.SGD or len(optimizer.param_groups) != 1:
        return f"its optimiser is {type(optimizer).__name__}, not one torch.optim.SGD parameter group"
    return None


def _find_blocker(module, data, device: torch.device, precision: str) -> str | None:
    why = shared_blocker(module, "a cumulative average, which vmap cannot update")
    if why is not None:
        return why
    if len(data) < 2:  # a rank without two training rows has only jobs of one sample (or none)
        return None
    # anything else vmap rejects (random ops in forward, .item(), data-dependent control flow):
    # one fused step of two copies of the model on two samples, on copies of its state
    module.to(device).train()
    batch = data.batch(torch.arange(2), device=device)
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(b, torch.Tensor) for b in batch)):
        return "its batches are not (inputs, labels) tensors, which the fused step's loss takes"
    x, y = batch
    stack = _Stack(FlatLayout.of(module), _trainable(module), [flatten(module)] * 2, device)
    try:
        FusedStep(module, stack.trainable, device, precision)(stack, x.expand(2, *x.shape), y.expand(2, *y.shape))
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as err:  # noqa: BLE001 -- the reason is reported; train_job then meets any real error
        text = str(err).split("\n")[0]
        if "random operation" in text:
            return "its forward draws random numbers"
        return f"torch.func.vmap rejects its forward ({type(err).__name__}: {text[:160]})"
    return None


def _trainable(module) -> list[str]:
    return [n for n, p in module.named_parameters() if p.requires_grad]


class _Stack:
    """G jobs' state stacked along a leading dimension (row r: one job): parameters and buffers
    by name, and the SGD momentum buffer of every trainable parameter (None before the first step,
    as in torch.optim.SGD's state)."""

    def __init__(self, layout: FlatLayout, trainable: list[str], starts: list[torch.Tensor], device: torch.device,
                 keep_base: bool = False):
        flat = torch.stack([s.reshape(-1) for s in starts]).to(device, torch.float32)
        self.layout, self.trainable, self.device = layout, trainable, device
        self.state = {n: t.clone(memory_format=torch.contiguous_format) for n, t in layout.split(flat).items()}
        self.momenta: dict = {n: None for n in trainable}
        # the rows' starts, w_base of the proximal term (train.prox_mu > 0 only)
        self.base = {n: self.state[n].clone() for n in trainable} if keep_base else None

    def row(self, r: int) -> torch.Tensor:
        """Row r as a flat float32 CPU vector, as flatten() gives for a module holding that state."""
        return join([self.state[n][r] for n in self.layout.names])

    def rows(self, rows: list[int]) -> "_Stack":
        """A new stack of the given rows (gathered copies)."""
        sel = torch.tensor(rows, device=self.device)
        sub = object.__new__(_Stack)
        sub.layout, sub.trainable, sub.device = self.layout, self.trainable, self.device
        sub.state = {n: v.index_select(0, sel) for n, v in self.state.items()}
        sub.momenta = {n: None if v is None else v.index_select(0, sel) for n, v in self.momenta.items()}
        sub.base = None if self.base is None else {n: v.index_select(0, sel) for n, v in self.base.items()}
        return sub

    def write(self, rows: list[int], sub: "_Stack") -> None:
        """Copy ``sub`` (made by rows(rows) and stepped) back into those rows. Every row is in one
        group per step, so momentum buffers made by the first step cover every row once all of
        that step's groups are written."""
        sel = torch.tensor(rows, device=self.device)
        for n, v in sub.state.items():
            self.state[n].index_copy_(0, sel, v)
        for n, v in sub.momenta.items():
            if v is not None:
                if self.momenta[n] is None:
                    self.momenta[n] = torch.empty_like(self.state[n])
                self.momenta[n].index_copy_(0, sel, v)


class FusedStep:
    """One optimiser step of a stack of jobs: ``vmap(grad(cross-entropy of forward))``, then the
    SGD of the model's ``configure_optimizers`` (torch's own ``sgd`` function, its hyperparameters);
    with ``prox_mu`` > 0 the proximal term is added to the gradients in between (the stack keeps the bases)."""

    def __init__(self, module, trainable: list[str], device: torch.device, precision: str = "32",
                 prox_mu: float = 0.0):
        from torch.func import functional_call, grad, vmap
        self.trainable, self.device, self.precision, self.prox_mu = trainable, device, precision, prox_mu
        group = module.configure_optimizers().param_groups[0]
        self.hyper = {k: group[k] for k in SGD_KEYS}

        def loss(params, buffers, x, y):
            return F.cross_entropy(functional_call(module, (params, buffers), (x,)), y)
        self.grads = vmap(grad(loss))

    @torch.no_grad()
    def __call__(self, stack: _Stack, x: torch.Tensor, y: torch.Tensor) -> None:
        """Update ``stack`` in place: parameters, momenta and the buffers (batch-norm statistics),
        with ``x``/``y`` of shape (rows, batch, ...)."""
        names = set(self.trainable)
        params = {n: v for n, v in stack.state.items() if n in names}
        buffers = {n: v for n, v in stack.state.items() if n not in names}  # frozen parameters too
        with torch.enable_grad(), _autocast(self.device, self.precision):
            grads = self.grads(params, buffers, x, y)
        if self.prox_mu:
            add_proximal([grads[n] for n in self.trainable], [params[n] for n in self.trainable],
                         [stack.base[n] for n in self.trainable], self.prox_mu)
        momenta = [stack.momenta[n] for n in self.trainable]
        sgd([params[n] for n in self.trainable], [grads[n] for n in self.trainable], momenta, **self.hyper)
        if self.hyper["momentum"] != 0:  # sgd made the buffers of a first step in the list
            stack.momenta.update(zip(self.trainable, momenta))


def train_jobs(module, starts: list[torch.Tensor], data, shards: list[torch.Tensor], *, epochs: list[int],
               batch_size: int, seeds: list[int], torch_seeds: list[int] | None = None, augment: bool = False,
               device: torch.device | str = "cpu", precision: str = "32", on_step=None,
               prox_mu: float = 0.0) -> list[torch.Tensor]:
    """Train len(starts) jobs together; return each job's trained flat vector (CPU), in order.

    Job j trains ``epochs[j]`` epochs from ``starts[j]`` on ``data[shards[j]]`` with data-order seed
    ``seeds[j]`` (and ``torch_seeds[j]`` for random layers, used where it trains alone). One job,
    or a model :func:`fusion_blocker` refuses, goes through train_job job by job.
    ``on_step()`` is called after every fused step; ``prox_mu``: ``train.prox_mu`` (0: no proximal term)."""
    device = torch.device(device)
    torch_seeds = torch_seeds if torch_seeds is not None else [None] * len(starts)
    if len(starts) == 1 or fusion_blocker(module, data, device, precision) is not None:
        return [train_job(module, s, data, idx, epochs=e, batch_size=batch_size, seed=seed, torch_seed=ts,
                          augment=augment, device=device, precision=precision, on_step=on_step, prox_mu=prox_mu)
                for s, idx, e, seed, ts in zip(starts, shards, epochs, seeds, torch_seeds)]
    module.to(device).train()
    plans = [StepPlan(idx, e, batch_size, seed, augment) for idx, e, seed in zip(shards, epochs, seeds)]
    stack = _Stack(FlatLayout.of(module), _trainable(module), starts, device, keep_base=bool(prox_mu))
    return _train_stack(FusedStep(module, stack.trainable, device, precision, prox_mu), stack, plans, data, device,
                        on_step)


def _train_stack(step_fn: FusedStep, stack: _Stack, plans: list[StepPlan], data, device, on_step) -> list:
    batches = [p.batches(data.augment_draws) for p in plans]
    results: list[torch.Tensor | None] = [None] * len(plans)
    rows = list(range(len(plans)))  # the job in each row of the stack
    step = 0
    while rows:
        # jobs that are done leave the stack (regrouping), so the rest step without gathers
        done = [r for r, j in enumerate(rows) if plans[j].steps <= step]
        if done:
            for r in done:
                results[rows[r]] = stack.row(r)
            keep = [r for r in range(len(rows)) if r not in done]
            rows = [rows[r] for r in keep]
            if not rows:
                break
            stack = stack.rows(keep)
        groups = defaultdict(list)  # this step's batch size -> rows
        for r, j in enumerate(rows):
            groups[plans[j].size(step)].append(r)
        # every group's rows are gathered before any is written back: at step 0 a row's momentum
        # buffer must still be "none yet" when its group steps
        subs = {size: None if len(members) == len(rows) else stack.rows(members) for size, members in groups.items()}
        for size, members in groups.items():
            taken = [next(batches[rows[r]]) for r in members]
            idx = torch.cat([b[1] for b in taken])
            draws = tuple(torch.cat(d) for d in zip(*(b[2] for b in taken))) if plans[0].augment else None
            x, y = data.batch(idx, augment=plans[0].augment, draws=draws, device=device)
            step_fn(stack if subs[size] is None else subs[size], x.view(len(members), size, *x.shape[1:]), y.view(len(members), size))
            if subs[size] is not None:
                stack.write(members, subs[size])
            if on_step is not None:
                on_step()
        step += 1
    return results
