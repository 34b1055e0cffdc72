"""One flat float32 vector per model: parameters *and* buffers, in state_dict order.

Batch-norm running statistics travel with the weights and take part in every aggregation
(integer buffers such as ``num_batches_tracked`` are carried as float32 and rounded back).
:meth:`FlatLayout.mask` tells the entries apart -- ``param`` (trainable parameters), ``stat``
(floating-point buffers) and ``counter`` (integer buffers) -- so that the aggregation rules can
keep counters out of averages and cosines (``algo.FlatParts``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FlatLayout:
    """Names, shapes and dtypes of a module's state in flat order (train/batched.py stacks and
    slices models by it)."""
    names: tuple
    shapes: tuple
    dtypes: tuple
    numel: int
    kinds: tuple = ()  # per state_dict entry: "param", "stat" or "counter"

    @classmethod
    def of(cls, module: torch.nn.Module) -> "FlatLayout":
        sd = module.state_dict()
        shapes = tuple(tuple(t.shape) for t in sd.values())
        trainable = {name for name, p in module.named_parameters() if p.requires_grad}
        kinds = tuple("param" if name in trainable else "stat" if t.dtype.is_floating_point else "counter"
                      for name, t in sd.items())
        return cls(tuple(sd.keys()), shapes, tuple(t.dtype for t in sd.values()),
                   sum(t.numel() for t in sd.values()), kinds)

    def mask(self, kind: str) -> torch.Tensor:
        """A bool vector over the flat entries: True where the entry is of ``kind``."""
        if kind not in ("param", "stat", "counter"):
            raise ValueError(f"unknown kind {kind!r}; allowed: param, stat, counter")
        return torch.cat([torch.full((math.prod(shape),), k == kind, dtype=torch.bool)
                          for k, shape in zip(self.kinds, self.shapes)]) if self.kinds else torch.zeros(0, dtype=torch.bool)

    def split(self, flat: torch.Tensor) -> dict:
        """name -> ``flat[..., entry]`` shaped ``(..., *shape)`` in the entry's dtype (integer buffers
        rounded back): one vector gives one model's state, a ``(G, numel)`` stack gives G models' state
        stacked along a leading dimension (what train/batched.py trains). Float32 entries are views."""
        if flat.shape[-1:] != (self.numel,):
            raise ValueError(f"flat vector has shape {tuple(flat.shape)}, the model needs (..., {self.numel})")
        lead, out, offset = flat.shape[:-1], {}, 0
        for name, shape, dtype in zip(self.names, self.shapes, self.dtypes):
            n = math.prod(shape)
            chunk = flat[..., offset:offset + n]
            if not dtype.is_floating_point:
                chunk = chunk.round()
            out[name] = chunk.to(dtype).reshape((*lead, *shape))
            offset += n
        return out


def join(tensors, device: torch.device | str = "cpu") -> torch.Tensor:
    """A new contiguous float32 vector of ``tensors`` one after another (a model's state in flat order).
    Each tensor crosses to ``device`` on its own: one pageable copy of the joined vector was slower
    for a ResNet-18 on a GPU (41.7 ms against 36.9 ms, docs/performance.md); graph slots bring their
    results back as one pinned, asynchronous copy instead (train/graphed.py)."""
    tensors = [t.detach().reshape(-1).to(device, torch.float32) for t in tensors]
    return torch.cat(tensors) if tensors else torch.zeros(0)


def flatten(module: torch.nn.Module, device: torch.device | str = "cpu") -> torch.Tensor:
    """A new contiguous float32 vector of the module's state, on ``device`` (the CPU by default)."""
    return join(module.state_dict().values(), device)


def load_flat(module: torch.nn.Module, flat: torch.Tensor) -> None:
    """Copy a flat vector into the module's parameters and buffers, in place."""
    sd = module.state_dict()
    total = sum(t.numel() for t in sd.values())
    if flat.dim() != 1 or flat.numel() != total:
        raise ValueError(f"flat vector has shape {tuple(flat.shape)}, the model needs ({total},)")
    layout = FlatLayout(tuple(sd), tuple(tuple(t.shape) for t in sd.values()), tuple(t.dtype for t in sd.values()), total)
    with torch.no_grad():
        for t, piece in zip(sd.values(), layout.split(flat).values()):
            t.copy_(piece)
