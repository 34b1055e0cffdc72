"""Each built-in rule's aggregation time against FedBuff's, its state's growth, and CA²FL's cache at scale (issue 62, 6).

    python benchmarks/rule_cost.py [--repeats 3] [--devices 100] [--threads 1]

For LeNet-5's and ResNet-18's flat vectors (d from the models themselves, built on torch's meta device) and a buffer
of K = 10 updates from ``--devices`` devices (each update from w_t, a seeded delta of scale 0.01), it times every
rule of algo/dispatch.py's RULES through ``aggregate`` (the dispatch a run makes), a stateful one after a first
aggregation has filled its state with the same devices, and prints the median time and its ratio to FedBuff's, and
the state's size after one and after two aggregations (summary.json's ``rule_state`` bytes, what a checkpoint's
``rule_state`` grows by). Then CA²FL's cache (runtime/ca2fl_cache.py) at 100 devices with ResNet-18 and at 10,000 and
1,000,000 devices with LeNet-5: memory, and disk for the checkpoints kept plus the one being written.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from seafl_dist.algo import BufferedUpdate, aggregate, memory_of
from seafl_dist.algo.dispatch import RULES
from seafl_dist.algo.memory import state_size
from seafl_dist.models import build_model
from seafl_dist.runtime.ca2fl_cache import cache_bytes, disk_bytes
from seafl_dist.settings import AlgorithmConfig

K = 10
MODELS = {"LeNet-5": ("lenet5", 1, 28), "ResNet-18": ("resnet18", 3, 32)}


def flat_size(name: str, channels: int, size: int) -> int:
    with torch.device("meta"):
        model = build_model(name, 10, channels, width=1.0, image_size=size, lightning=False)
    return sum(t.numel() for t in model.state_dict().values())


def buffer(w: torch.Tensor, devices: int, seed: int) -> list[BufferedUpdate]:
    g = torch.Generator().manual_seed(seed)
    return [BufferedUpdate(device=(seed * K + k) % devices, job=seed * K + k, base_version=0, n_samples=10 + k,
                           epochs=1, flat=w + 0.01 * torch.randn(w.shape, generator=g)) for k in range(K)]


def time_rule(rule: str, w: torch.Tensor, devices: int, repeats: int) -> tuple[float, list[int]]:
    cfg = AlgorithmConfig(name=rule, buffer_size=K)
    cfg.num_devices = devices
    memory = memory_of(cfg)
    sizes = []
    for seed in range(2):  # fill the state (a stateful rule's second aggregation is the steady one)
        aggregate(cfg, 0, w, buffer(w, devices, seed), lambda v: w, memory=memory)
        sizes.append(state_size(memory.state)["bytes"])
    ups = buffer(w, devices, 0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        aggregate(cfg, 0, w, ups, lambda v: w, memory=memory)
        times.append(time.perf_counter() - start)
    return statistics.median(times), sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    d_of = {label: flat_size(*spec) for label, spec in MODELS.items()}
    print(f"| model (d) | rule | median time | × FedBuff | state after 1 / 2 aggregations |\n|---|---|---|---|---|")
    for label, d in d_of.items():
        w = torch.randn(d, generator=torch.Generator().manual_seed(1))
        results = {rule: time_rule(rule, w, args.devices, args.repeats) for rule in RULES}
        base = results["fedbuff"][0]
        for rule, (t, sizes) in results.items():
            print(f"| {label} ({d:,}) | {rule} | {t * 1e3:.1f} ms | {t / base:.2f} | "
                  f"{' / '.join(f'{b / 1e6:.1f} MB' for b in sizes)} |")
    print("\n| CA²FL cache | devices D | memory | disk (checkpoints kept + 1) |\n|---|---|---|---|")
    for label, devices in (("ResNet-18", 100), ("LeNet-5", 10_000), ("LeNet-5", 1_000_000)):
        d = d_of[label]
        print(f"| {label} ({d:,}) | {devices:,} | {cache_bytes(devices, d) / 1e9:.2f} GB | "
              f"{disk_bytes(devices, d) / 1e9:.2f} GB |")


if __name__ == "__main__":
    main()
