"""Jobs on a GPU as CUDA graphs, several at once on their own streams (``runtime.cuda_graphs``).

A job's batch-32 step leaves most of a GPU idle, and launching its few hundred kernels one by one
costs more CPU time than the GPU spends on them. So each job trains on a :class:`Slot`: its own
copy of the model, optimiser, CUDA stream and a CUDA graph of one whole optimiser step (forward,
loss, backward, SGD) captured once for the full batch size. A step copies its batch into the
graph's static inputs and replays it: two copies and one launch. G slots (``runtime.batch_jobs``)
train G jobs at once, their steps interleaved, so the GPU runs one job's kernels while another's
wait (measured on an H200: ResNet-18 fp32 10,754 images/s on one stream, 20,821 on four with
channels-last; docs/performance.md).

The math is the job's own, step for step, as :func:`~seafl_dist.train.local.train_job` does it:

- the batches of its :class:`~seafl_dist.train.plan.StepPlan` (same generator, same draws), built
  an epoch at a time in a few kernels instead of a batch at a time (gathers and elementwise
  arithmetic: the same values);
- the model's own ``training_step`` and ``configure_optimizers`` (captured, not rewritten); a
  batch of another size (a shard's trailing batch, a shard smaller than a batch) steps eagerly on
  the same tensors, so the graphs are bounded (one per slot);
- SGD's first step of a job: the momentum buffers are zeroed when the job starts, and
  ``0.9 * 0 + g`` is ``g`` exactly, so the first replay gives the first eager step's bits.
- ``train.prox_mu`` > 0: the proximal term (train/proximal.py) between backward and SGD, captured
  with them; w_base is a static copy of the trainable parameters that each job's start is copied into.

A graph replays exactly the kernels of the eager step, so with ``runtime.deterministic`` a job
gives the same bits as train_job, on any slot, with any G (tests/gpu checks it byte for byte).
What the graph cannot hold is found before training (:func:`graph_blocker`: random layers, batch
norm's cumulative average, a loss or optimiser of the model's own, or a capture that fails) and
trained eagerly, with one line. Results leave the GPU once each: one contiguous vector copied
into pinned host memory on the slot's stream. On a CPU a slot has no stream and no graph and
steps eagerly: the same code, so the CPU tests check every step of its math against train_job.
"""
from __future__ import annotations

import copy
from collections import deque
from contextlib import nullcontext

import torch

from seafl_dist.train.flat import load_flat
from seafl_dist.train.local import _autocast, memory_format
from seafl_dist.train.plan import StepPlan
from seafl_dist.train.proximal import Proximal

WARMUP_STEPS = 3  # eager steps on a side stream before capture (cuDNN/cuBLAS handles, autograd's buffers)
PREP_BATCHES = 64  # batches prepared at once (a bound on the memory an epoch's images take)


def graph_blocker(module) -> str | None:
    """Why jobs of ``module`` cannot be trained as graphs (then train_job trains them), or None."""
    from seafl_dist.train.batched import shared_blocker
    why = shared_blocker(module, "a cumulative average, read on the host")
    if why is not None:
        return why
    for name, layer in module.named_modules():
        if isinstance(layer, torch.nn.RNNBase):  # cuDNN's RNN kernels under capture: never run on a GPU here
            return f"its layer {name} ({type(layer).__name__}) is recurrent, and a recurrent layer's graph has not " \
                   "been run on a GPU yet"
    group = module.configure_optimizers().param_groups[0]
    if group["dampening"] != 0 or group["nesterov"]:
        return "its SGD has dampening or Nesterov momentum (a job's first step would differ)"
    return None


class Slot:
    """One job at a time on its own model copy, optimiser, stream and step graph."""

    def __init__(self, module, data, batch_size: int, device: torch.device, precision: str, prox_mu: float = 0.0):
        self.device, self.precision, self.batch_size = device, precision, batch_size
        self.module = copy.deepcopy(module).to(device).train()
        self.fmt = memory_format(self.module, device)
        self.module.to(memory_format=self.fmt)
        self.optimizer = self.module.configure_optimizers()
        self.prox = Proximal.of(self.module, prox_mu)  # its bases: static, rebased by every job's begin()
        cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if cuda else None  # a CPU slot (tests) steps eagerly
        self.graph = None
        if cuda:
            self.stream.wait_stream(torch.cuda.current_stream(device))
        with on(self.stream):
            x, self.y = data.batch(torch.arange(batch_size) % len(data), device=device)
            self.x = x.contiguous(memory_format=self.fmt)
            for i in range(WARMUP_STEPS):  # also makes the momentum buffers the graph updates in place
                self.eager_step(self.x, self.y, i)
            if cuda:
                self.optimizer.zero_grad(set_to_none=True)  # the graph's backward writes its own gradients
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph, stream=self.stream):
                    self._loss(self.x, self.y, 0, cache=False).backward()
                    if self.prox is not None:
                        self.prox.add()
                    self.optimizer.step()
        if cuda:
            torch.cuda.current_stream(device).wait_stream(self.stream)
        self.buffers = [s["momentum_buffer"] for s in self.optimizer.state.values() if "momentum_buffer" in s]

    def _loss(self, x, y, i, cache=True):
        with _autocast(self.device, self.precision, cache=cache):
            return self.module.training_step((x, y), i)

    def eager_step(self, x, y, i) -> None:
        """Exactly train_job's step (on this slot's tensors, updated in place)."""
        loss = self._loss(x, y, i)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.prox is not None:
            self.prox.add()
        self.optimizer.step()

    def begin(self, start: torch.Tensor) -> None:
        """Load a job's start model (a flat vector, on the host or this device); its SGD starts
        afresh (momentum zero: the first step's bits)."""
        load_flat(self.module, start.to(self.device, non_blocking=True))
        for buf in self.buffers:
            buf.zero_()
        if self.prox is not None:
            self.prox.rebase()

    def step(self, x, y, i) -> None:
        if self.graph is not None and x.shape[0] == self.batch_size:
            self.x.copy_(x)
            self.y.copy_(y)
            self.graph.replay()
        else:
            self.eager_step(x, y, i)

    def result(self) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """The trained model as one flat float32 vector in host memory (pinned, from a GPU: copied
        once, asynchronously; ready when the event has passed)."""
        flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in self.module.state_dict().values()])
        if self.stream is None:
            return flat, None
        host = torch.empty(flat.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(flat, non_blocking=True)
        done = torch.cuda.Event()
        done.record(self.stream)
        return host, done


def on(stream):
    """``stream`` as the current CUDA stream for the block (None: a CPU slot, nothing to switch)."""
    return torch.cuda.stream(stream) if stream is not None else nullcontext()


def _feed(plan: StepPlan, data, device, fmt):
    """``(index in epoch, x, y)`` per step of ``plan``: up to PREP_BATCHES batches' images made at once
    (one gather, crop, flip and normalisation for all of them), in the plan's order and draws."""
    steps = plan.batches(data.augment_draws)
    while True:
        chunk = [b for _, b in zip(range(PREP_BATCHES), steps)]
        if not chunk:
            return
        idx = torch.cat([b[1] for b in chunk])
        draws = tuple(torch.cat(d) for d in zip(*(b[2] for b in chunk))) if plan.augment else None
        x, y = data.batch(idx, augment=plan.augment, draws=draws, device=device)
        x = x.contiguous(memory_format=fmt)
        lo = 0
        for i, b, _ in chunk:
            hi = lo + len(b)
            yield i, x[lo:hi], y[lo:hi]
            lo = hi


def train_slots(slots: list[Slot], starts: list[torch.Tensor], data, shards: list[torch.Tensor], *,
                epochs: list[int], batch_size: int, seeds: list[int], augment: bool = False,
                on_step=None) -> list[torch.Tensor]:
    """Train the jobs on the slots, at most len(slots) at once, each job's steps in order and
    the slots' steps interleaved; each job's trained flat vector (CPU, pinned), in order."""
    device = slots[0].device
    queue = deque(range(len(starts)))
    running: dict[int, tuple[int, object]] = {}  # slot -> (job, its feed)
    copies = [None] * len(starts)
    caller = torch.cuda.current_stream(device) if device.type == "cuda" else None

    on_device: dict[int, torch.Tensor] = {}  # id(start) -> it on the GPU: jobs of one version cross once

    def start(s: int) -> None:
        j = queue.popleft()
        slot = slots[s]
        with on(slot.stream):
            slot.begin(on_device.get(id(starts[j]), starts[j]))
            plan = StepPlan(shards[j], epochs[j], batch_size, seeds[j], augment)
            running[s] = (j, _feed(plan, data, device, slot.fmt))

    if caller is not None:  # every start the group needs, on the GPU before any slot reads one
        for j in range(len(starts)):
            on_device.setdefault(id(starts[j]), starts[j].to(device, non_blocking=True))
    for s in range(len(slots)):
        if caller is not None:
            slots[s].stream.wait_stream(caller)
        if queue:
            start(s)
    while running:
        for s in list(running):
            j, feed = running[s]
            slot = slots[s]
            with on(slot.stream):
                taken = next(feed, None)
                if taken is None:
                    copies[j] = slot.result()
                    del running[s]
                    if queue:
                        start(s)
                    continue
                slot.step(taken[1], taken[2], taken[0])
            if on_step is not None:
                on_step()
    for slot in slots:
        if caller is not None:
            caller.wait_stream(slot.stream)
    for _, done in copies:
        if done is not None:
            done.synchronize()
    return [host for host, _ in copies]
