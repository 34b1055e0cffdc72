"""Local training of many jobs at once (``runtime.batch_jobs`` = G > 1): one rank, G simulated devices.

A job's batch-32 step is launch-bound on a GPU (the device idles most of the time), so G jobs'
steps are fused into one with PyTorch's "model ensembling" recipe: the G models' parameters and
buffers are stacked along a new leading dimension and ``vmap(grad(loss))`` over
``functional_call`` computes every job's gradient in one pass (a convolution becomes a grouped
convolution). Every job keeps its own math, exactly as :func:`~seafl_dist.train.local.train_job`
does it alone:

- its start model, its shard, its batch order and augmentation drawn from its own generator in
  the same order (so the batches are the same tensors), its epoch count (SEAFL² partial jobs);
- SGD with momentum and weight decay as ``torch.optim.SGD`` (dampening 0, no Nesterov) does it,
  applied to the stacked tensors (a zero momentum buffer times m plus g is g, SGD's first step);
- its own batch-norm running statistics: the buffers are stacked too, and batch norm updates
  each job's slice inside ``vmap``;
- the same trailing-batch rule (a last batch of one sample is skipped).

Jobs with different step counts or a different last-batch size: at each step the jobs still
training are grouped by this step's batch size, and each group takes one fused step (the full
stack in place when every job is in it, otherwise on gathered rows written back). A job that has
finished leaves the stack, so the remaining ones again step without gathers. No job's result
depends on the others; it differs from the job trained alone only by floating-point rounding
(grouped vs single convolutions): the tests hold it to a relative L2 difference <= 1e-4 in fp32.

The fused step uses the cross-entropy of ``forward`` and ``train_config``'s SGD, which is what
the base :class:`~seafl_dist.models.base.FLNet` ``training_step`` / ``configure_optimizers`` do.
A model class overriding either is trained one job at a time with ``train_job`` (see
:func:`batchable`), so a custom loss is never silently replaced.
"""
from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F

from seafl_dist.train.flat import FlatLayout
from seafl_dist.train.local import _autocast, train_job


def batchable(module) -> bool:
    """Whether ``module`` trains with the base loss and optimiser (then jobs may be fused)."""
    from seafl_dist.models.base import FLNet
    cls = type(module)
    return (isinstance(module, FLNet) and cls.training_step is FLNet.training_step
            and cls.configure_optimizers is FLNet.configure_optimizers)


def epoch_sizes(n: int, batch_size: int) -> list[int]:
    """The batch sizes of one epoch over ``n`` samples, after train_job's trailing-batch rule."""
    sizes = [min(batch_size, n - lo) for lo in range(0, n, batch_size)]
    if sizes and sizes[-1] == 1 and n > 1 and batch_size > 1:
        sizes.pop()
    return sizes


def _plan(indices: torch.Tensor, epochs: int, batch_size: int, seed: int, augment: bool, draw):
    """The job's (indices, augmentation draws) per step, using its generator as train_job does."""
    gen = torch.Generator().manual_seed(seed)
    n = len(indices)
    for _epoch in range(epochs):
        order = indices[torch.randperm(n, generator=gen)]
        for lo in range(0, n, batch_size):
            idx = order[lo:lo + batch_size]
            if len(idx) == 1 and n > 1 and batch_size > 1:
                continue
            yield idx, (draw(len(idx), gen) if augment else None)


def _stack_flats(layout: FlatLayout, starts: list[torch.Tensor], device: torch.device) -> dict:
    """name -> (G, *shape) tensor on ``device``: each row one start vector, unflattened as load_flat does."""
    flat = torch.stack([s.reshape(-1) for s in starts]).to(device, torch.float32)
    if flat.shape[1] != layout.numel:
        raise ValueError(f"flat vectors have {flat.shape[1]} values, the model needs {layout.numel}")
    state, offset, g = {}, 0, len(starts)
    for name, shape, dtype in zip(layout.names, layout.shapes, layout.dtypes):
        n = 1
        for d in shape:
            n *= d
        chunk = flat[:, offset:offset + n]
        if not dtype.is_floating_point:
            chunk = chunk.round()
        state[name] = chunk.to(dtype).reshape(g, *shape).clone()
        offset += n
    return state


def _row_flat(layout: FlatLayout, state: dict, row: int) -> torch.Tensor:
    """One job's flat float32 CPU vector, as flatten() gives for a module holding that state."""
    return torch.cat([state[n][row].reshape(-1).to("cpu", torch.float32) for n in layout.names])


class FusedStep:
    """One SGD step of a group of jobs: ``vmap(grad(cross-entropy of forward))`` + stacked SGD."""

    def __init__(self, module, param_names: list[str], *, lr: float, momentum: float, weight_decay: float,
                 device: torch.device, precision: str = "32"):
        from torch.func import functional_call, grad, vmap
        self.param_names = param_names
        self.lr, self.momentum, self.wd = lr, momentum, weight_decay
        self.device, self.precision = device, precision

        def loss(params, buffers, x, y):
            return F.cross_entropy(functional_call(module, (params, buffers), (x,)), y)
        self.grads = vmap(grad(loss))

    def __call__(self, params: dict, buffers: dict, momenta: dict | None, x: torch.Tensor, y: torch.Tensor) -> None:
        """Update ``params``, ``buffers`` (batch-norm statistics) and ``momenta`` in place."""
        with _autocast(self.device, self.precision):
            grads = self.grads(params, buffers, x, y)
        p = [params[n] for n in self.param_names]
        g = [grads[n] for n in self.param_names]
        if self.wd != 0:
            g = torch._foreach_add(g, p, alpha=self.wd)
        if self.momentum != 0:
            m = [momenta[n] for n in self.param_names]
            torch._foreach_mul_(m, self.momentum)
            torch._foreach_add_(m, g)
            g = m
        torch._foreach_add_(p, g, alpha=-self.lr)


def train_jobs(module, starts: list[torch.Tensor], data, shards: list[torch.Tensor], *, epochs: list[int],
               batch_size: int, seeds: list[int], augment: bool = False, device: torch.device | str = "cpu",
               precision: str = "32", on_step=None) -> list[torch.Tensor]:
    """Train len(starts) jobs together; return each job's trained flat vector (CPU), in order.

    Job j trains ``epochs[j]`` epochs from ``starts[j]`` on ``data[shards[j]]`` with seed
    ``seeds[j]``. One job, or a module with its own loss or optimiser, goes through train_job.
    ``on_step()`` is called after every fused step."""
    device = torch.device(device)
    if len(starts) == 1 or not batchable(module):
        return [train_job(module, s, data, idx, epochs=e, batch_size=batch_size, seed=seed, augment=augment,
                          device=device, precision=precision, on_step=on_step)
                for s, idx, e, seed in zip(starts, shards, epochs, seeds)]
    module.to(device).train()
    layout = FlatLayout.of(module)
    param_names = [n for n, _ in module.named_parameters()]
    state = _stack_flats(layout, starts, device)
    t = module.train_config
    step_fn = FusedStep(module, param_names, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay,
                        device=device, precision=precision)
    momenta = {n: torch.zeros_like(state[n]) for n in param_names} if t.momentum != 0 else {}
    sizes = [epoch_sizes(len(idx), batch_size) for idx in shards]
    steps = [e * len(s) for e, s in zip(epochs, sizes)]
    plans = [_plan(idx, e, batch_size, seed, augment, data.augment_draws)
             for idx, e, seed in zip(shards, epochs, seeds)]
    results: list[torch.Tensor | None] = [None] * len(starts)
    rows = list(range(len(starts)))  # the job in each row of the stacked state
    step = 0
    while rows:
        # jobs that are done leave the stack (regrouping), so the rest step without gathers
        done = [r for r, j in enumerate(rows) if steps[j] <= step]
        if done:
            for r in done:
                results[rows[r]] = _row_flat(layout, state, r)
            keep = [r for r in range(len(rows)) if r not in done]
            rows = [rows[r] for r in keep]
            if not rows:
                break
            sel = torch.tensor(keep, device=device)
            state = {n: v.index_select(0, sel) for n, v in state.items()}
            momenta = {n: v.index_select(0, sel) for n, v in momenta.items()}
        groups = defaultdict(list)  # this step's batch size -> rows
        for r, j in enumerate(rows):
            groups[sizes[j][step % len(sizes[j])]].append(r)
        for size, members in groups.items():
            batches = [next(plans[rows[r]]) for r in members]
            idx = torch.cat([b[0] for b in batches])
            draws = tuple(torch.cat(d) for d in zip(*(b[1] for b in batches))) if augment else None
            x, y = data.batch(idx, augment=augment, draws=draws, device=device)
            x, y = x.view(len(members), size, *x.shape[1:]), y.view(len(members), size)
            if len(members) == len(rows):
                _split_step(step_fn, state, momenta, param_names, x, y)
            else:
                sel = torch.tensor(members, device=device)
                sub = {n: v.index_select(0, sel) for n, v in state.items()}
                sub_m = {n: v.index_select(0, sel) for n, v in momenta.items()}
                _split_step(step_fn, sub, sub_m, param_names, x, y)
                for n, v in sub.items():
                    state[n].index_copy_(0, sel, v)
                for n, v in sub_m.items():
                    momenta[n].index_copy_(0, sel, v)
            if on_step is not None:
                on_step()
        step += 1
    return results


def _split_step(step_fn: FusedStep, state: dict, momenta: dict, param_names: list[str], x, y) -> None:
    names = set(param_names)
    params = {n: v for n, v in state.items() if n in names}
    buffers = {n: v for n, v in state.items() if n not in names}
    step_fn(params, buffers, momenta or None, x, y)
