"""What each aggregation rule costs beside FedBuff: its time per aggregation, its state's memory, and how much the
state adds to a checkpoint (issue 62, 6).

    python benchmarks/rules.py [--iters 10] [--devices 20] [--models lenet5,resnet18] [--dir DIR]

For LeNet-5 (MNIST shape) and ResNet-18 (CIFAR-10 shape, width 1) flat vectors, every rule in
``seafl_dist.algo.dispatch.RULES`` (the built-in ones, so rules merged later appear here as they are) and a user's
rule with memory named by import path (tests/user_extensions.py ``fair_momentum``) aggregate the same buffers of
K = 10 updates, side by side in one run, as the server calls them (``aggregate`` with the rule's ``RuleMemory``
carried from one aggregation to the next). Each buffer holds 10 of ``--devices`` devices' updates, each from a base
0 to 3 versions stale; a warm-up pass first lets every device contribute, so a state kept per device is at its
steady size. Printed per rule: the median time of an aggregation over ``--iters`` buffers and its ratio to FedBuff's
measured in this run (issue 62 aims at most 2x), the state's bytes after the warm-up (algo/memory.py
``state_size``: storage shared counted once), and the bytes of a checkpoint (runtime/checkpoint.py ``save``, the
state benchmarks/checkpoint.py writes, one model version) without and with its ``rule_state``. For a stateful
rule, its state's size at the populations issue 62 names (ResNet-18: 100 devices; LeNet-5: 10,000 and 1,000,000),
from how it grew over the warm-up's first and last aggregation (devices seen: 10, then ``--devices``). A rule whose config
refuses K = 10 (fedasync: K = 1) gets buffers of the K its config resolves to, said in the K column. A script, not a
test: no figure is hard-coded, each is measured when it runs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from checkpoint import MODELS, state_of  # benchmarks/, on sys.path when run as a script
from seafl_dist.algo import BufferedUpdate, FlatParts, aggregate, memory_of
from seafl_dist.algo.dispatch import RULES
from seafl_dist.algo.memory import state_size
from seafl_dist.models import build_model
from seafl_dist.runtime import checkpoint
from seafl_dist.settings import config_from_dict
from seafl_dist.train import FlatLayout, flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the user's rule: user_extensions
USER_RULE = "user_extensions:fair_momentum"
K = 10
STALE = 3  # the stalest base a buffer's update has
# the populations issue 62 sizes a per-device state at (CA²FL's cache): from the warm-up's growth with devices seen
POPULATIONS = {"resnet18": [100], "lenet5": [10_000, 1_000_000]}


def algorithm(name: str):
    """The rule's ``algorithm`` section at K = 10 (or the K its config resolves to), β off."""
    return config_from_dict({}, [f"algorithm.name={name}", f"algorithm.buffer_size={K}",
                                 "algorithm.staleness_limit=null"]).algorithm


class Buffers:
    """The model versions a buffer may start from (w_{t-3} .. w_t, the rule's own models) and buffers from them."""

    def __init__(self, flat: torch.Tensor, devices: int):
        self.devices, self.g = devices, torch.Generator().manual_seed(0)
        self.versions = {0: flat.clone()}
        self.arrivals = 0

    def add(self, t: int, w: torch.Tensor) -> None:
        self.versions[t] = w
        self.versions.pop(t - STALE - 1, None)

    def buffer(self, t: int, k: int) -> list[BufferedUpdate]:
        """``k`` updates at version t, devices in turn (every one of ``devices`` seen in each pass)."""
        out = []
        for _ in range(k):
            base = max(0, t - int(torch.randint(0, STALE + 1, (1,), generator=self.g)))
            flat = self.versions[base] + 1e-2 * torch.randn(self.versions[base].shape, generator=self.g)
            out.append(BufferedUpdate(device=self.arrivals % self.devices, job=self.arrivals, flat=flat,
                                      n_samples=50 + self.arrivals % 7, base_version=base, epochs=1))
            self.arrivals += 1
        return out


def measure(name: str, flat: torch.Tensor, parts: FlatParts, devices: int, iters: int) -> dict:
    """One rule on its own buffers (the same seeds for every rule): its K, the median seconds of an aggregation
    (the buffer made before the clock starts), its memory after the warm-up and the timed aggregations."""
    cfg = algorithm(name)
    k = min(K, cfg.buffer_size)
    memory = memory_of(cfg)
    made = Buffers(flat, devices)
    times, sizes = [], []
    warm = -(-devices // k)  # every device contributes once before the clock runs
    for t in range(warm + iters):
        updates = made.buffer(t, k)
        start = time.perf_counter()
        result = aggregate(cfg, t, made.versions[t], updates, made.versions.__getitem__, parts, memory=memory)
        if t >= warm:
            times.append(time.perf_counter() - start)
        else:  # (devices seen so far, the state's bytes)
            sizes.append((min(made.arrivals, devices), state_size(memory.state)["bytes"]))
        made.add(t + 1, result.new_global)
    return {"k": k, "s": statistics.median(times), "memory": memory, "sizes": sizes}


def at_population(sizes: list[tuple[int, int]], n: int) -> float:
    """The state's bytes at ``n`` devices seen, from the warm-up's first and last (devices, bytes): a state of fixed
    entries and one entry per device seen (a per-device cache) grows by one device's bytes a device."""
    (n0, b0), (n1, b1) = sizes[0], sizes[-1]
    per_device = (b1 - b0) / (n1 - n0) if n1 > n0 else 0.0
    return b0 + per_device * (n - n0)


def checkpoint_bytes(out: Path, state: dict) -> int:
    path = checkpoint.save(out, state)
    size = path.stat().st_size
    checkpoint.remove_all(out)
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=10, help="timed aggregations per rule (the median is printed)")
    ap.add_argument("--devices", type=int, default=20, help="devices whose updates fill the buffers")
    ap.add_argument("--models", default="lenet5,resnet18")
    ap.add_argument("--dir", help="where the checkpoints are written (default: a temp dir)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # one thread, as a run's server on a shared machine (runtime.threads)
    rules = [*RULES, USER_RULE]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        out = Path(tmp)
        print(f"{'model':<9} {'rule':<30} {'K':>2} {'ms/agg':>8} {'/fedbuff':>8} {'state MB':>9} "
              f"{'ckpt MB':>8} {'+state MB':>9}")
        for model in args.models.split(","):
            torch.manual_seed(0)
            net = build_model(model, **MODELS[model])
            layout = FlatLayout.of(net)
            parts = FlatParts(params=layout.mask("param"), stats=layout.mask("stat"), counters=layout.mask("counter"))
            flat = flatten(net)
            results = {name: measure(name, flat, parts, args.devices, args.iters) for name in rules}
            plain = checkpoint_bytes(out, state_of(flat, 1))
            base_s = results["fedbuff"]["s"]
            for name, r in results.items():
                memory = r["memory"]
                state_mb = state_size(memory.state)["bytes"] / 1e6
                grown = (checkpoint_bytes(out, {**state_of(flat, 1), "rule_state": memory.of_snapshot(memory.state)})
                         if memory.stateful else plain)
                print(f"{model:<9} {name:<30} {r['k']:>2} {1e3 * r['s']:>8.2f} {r['s'] / base_s:>8.2f} "
                      f"{state_mb:>9.2f} {plain / 1e6:>8.2f} {(grown - plain) / 1e6:>9.2f}")
            print(f"{model:<9} d = {flat.numel():,} entries ({4 * flat.numel() / 1e6:.1f} MB float32), "
                  f"{args.devices} devices")
            for name, r in results.items():
                if r["memory"].stateful and len(r["sizes"]) > 1:
                    print(f"{model:<9} {name}: state at " + ", ".join(
                        f"{n:,} devices {at_population(r['sizes'], n) / 1e9:.3g} GB" for n in POPULATIONS[model]))


if __name__ == "__main__":
    main()
