"""A user's own model, dataset, partition and aggregation rule, as a test writes them to a file.

``write(folder)`` puts ``SOURCE`` in ``folder/<name>.py`` under a fresh module name (so tests never
share a cached import) and returns the name; ``EXTENDED(name)`` are the overrides that use all four.
The dataset is 4 classes of 8x8 float images with a bright band per class: learnable in a few
aggregations, made on the spot on every rank.
"""
import itertools
from pathlib import Path

SOURCE = '''
import numpy as np
import torch
from torch import nn
from seafl_dist.algo import AggregationResult, screen

NUMBER = 3


def tiny_mlp(num_classes, in_channels, image_size, width):
    hidden = max(1, int(32 * width))
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))


def bands(root, train):
    g = torch.Generator().manual_seed(0 if train else 1)
    n = 400 if train else 120
    labels = torch.randint(0, 4, (n,), generator=g)
    images = torch.rand(n, 1, 8, 8, generator=g) * 0.5
    for k in range(4):
        images[labels == k, 0, 2 * k:2 * k + 2, :] += 1.0
    return images, labels


def sorted_blocks(labels, num_devices, seed):
    return np.array_split(np.argsort(labels, kind="stable"), num_devices)


def uniform_mean(cfg, version, global_flat, updates, base_model):
    accepted, info = screen(version, global_flat, updates)
    if not accepted:
        return AggregationResult(global_flat.clone(), info)
    for i in accepted:
        info[i]["weight"] = 1 / len(accepted)
    return AggregationResult(torch.stack([updates[i].flat for i in accepted]).mean(0), info)
'''
# Plain nn.Modules the fused step (runtime.batch_jobs > 1) cannot or must not train as the built-ins:
# random layers, a cumulative batch-norm average, a frozen layer. ``model.name=<name>:dropout_mlp``.
LAYERS = SOURCE + '''

def dropout_mlp(num_classes, in_channels, image_size, width):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, 32), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(32, num_classes))


def cumulative_bn_mlp(num_classes, in_channels, image_size, width):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, 32), nn.BatchNorm1d(32, momentum=None),
                         nn.ReLU(), nn.Linear(32, num_classes))
'''
# A model with an op that has no deterministic implementation (put_, on CPUs and GPUs alike):
# runtime.deterministic must stop it before training. ``model.name=<name>:put_mlp``.
NONDETERMINISTIC = SOURCE + '''

class PutMLP(nn.Module):
    def __init__(self, num_classes, in_channels, image_size):
        super().__init__()
        self.fc = nn.Linear(in_channels * image_size ** 2, num_classes)

    def forward(self, x):
        out = self.fc(torch.flatten(x, 1))
        mark = torch.zeros(out.numel(), device=out.device).put_(torch.zeros(1, dtype=torch.long, device=out.device),
                                                                 torch.ones(1, device=out.device))
        return out + 0 * mark.view_as(out)


def put_mlp(num_classes, in_channels, image_size, width):
    return PutMLP(num_classes, in_channels, image_size)
'''
_names = itertools.count()


def mean_of_any(cfg, version, global_flat, updates, base_model, **params):
    """A rule of one's own that takes any keyword argument (``algorithm.params``): the buffer's plain mean."""
    import torch
    from seafl_dist.algo import AggregationResult
    info = [{"weight": 1 / len(updates)} for _ in updates]
    return AggregationResult(torch.stack([u.flat for u in updates]).mean(0), info)


def mlp_of_any(num_classes, in_channels, image_size, width, **params):
    """A model builder of one's own that takes any keyword argument (``model.params``)."""
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, num_classes))


def write(folder, source: str = SOURCE, prefix: str = "user_ext") -> str:
    name = f"{prefix}_{next(_names)}_{abs(hash(str(folder))) % 10**8}"
    (Path(folder) / f"{name}.py").write_text(source)
    return name


def EXTENDED(name: str) -> list[str]:
    return [f"model.name={name}:tiny_mlp", f"data.name={name}:bands", f"data.partition={name}:sorted_blocks",
            f"algorithm.name={name}:uniform_mean", "algorithm.staleness_limit=null"]


def fair_momentum(cfg, version, global_flat, updates, base_model, *, state, beta=0.5):
    """A rule of one's own with memory (docs/extending.md, "A rule with memory"): each kept update's delta
    Δ_k = w_k − w_{t_k}, weighted p_k ∝ 1 / (1 + c_i) with c_i how many of device i's updates were aggregated before
    this buffer (0 for a device never seen), normalised; heavy-ball momentum m ← β m + Σ p_k Δ_k (m = Σ p_k Δ_k at
    the first step), w_{t+1} = w_t + m. Its state: {"m": m, "seen": {device: c_i}}, a new mapping each time that
    shares the counts of the devices not in the buffer. A buffer with no update kept: w_t, and the state as it was."""
    import torch
    from seafl_dist.algo import AggregationResult, screen
    accepted, info = screen(version, global_flat, updates)
    if not accepted:
        return AggregationResult(global_flat.clone(), info, state=state)
    seen = dict(state.get("seen", {}))  # a shallow copy: the state handed in is never written
    raw = {i: 1.0 / (1 + seen.get(updates[i].device, 0)) for i in accepted}
    step = torch.zeros_like(global_flat)
    for i in accepted:
        u = updates[i]
        info[i]["weight"] = raw[i] / sum(raw.values())
        step = step + info[i]["weight"] * (u.flat.to(global_flat) - base_model(u.base_version))
    for i in accepted:
        seen[updates[i].device] = seen.get(updates[i].device, 0) + 1
    m = beta * state["m"] + step if "m" in state else step  # a new tensor: the old m is never written in place
    return AggregationResult(global_flat + m, info, state={"m": m, "seen": seen})

