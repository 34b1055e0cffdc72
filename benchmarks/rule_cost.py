"""What each aggregation rule costs the server, side by side (issue 62, item 6): one aggregation's time as a ratio
to FedBuff's, and the state a checkpoint gains.

    python benchmarks/rule_cost.py [--repeats 5] [--sizes lenet5 resnet18] [--k 10]

Per rule and flat-vector size (LeNet-5's 61,706 and ResNet-18's 11,173,962 parameters, float32), it builds a buffer
of K updates of random deltas from staggered bases (staleness 0..K−1, so the delay-adaptive η acts), then times
the server's two stages as a run does them: the rule (algo/dispatch.py ``aggregate``, with the rule's memory) and
the server optimizer (algo/server_opt.py). Each rule is warmed up on one aggregation (a stateful rule's or
optimizer's state filled) and timed over ``--repeats`` more, the state carried between them; the median is
reported, and its ratio to FedBuff's. The checkpoint's growth is the bytes of the state a checkpoint holds on top
of FedBuff's (``rule_state`` and ``server_opt``). A rule is a config (``RULES`` below): add one line per rule.
Then CA²FL's cache (runtime/ca2fl_cache.py) at 100 devices with ResNet-18 and at 10,000 and 1,000,000 devices with
LeNet-5: memory, and disk for the checkpoints kept plus the one being written.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from seafl_dist.algo import BufferedUpdate, ServerOptimizer, aggregate, memory_of
from seafl_dist.algo.memory import state_size
from seafl_dist.runtime.ca2fl_cache import cache_bytes, disk_bytes
from seafl_dist.settings import config_from_dict

SIZES = {"lenet5": 61_706, "resnet18": 11_173_962}
RULES = {  # name: overrides of the config; FedBuff first (the baseline)
    "fedbuff": ["algorithm.name=fedbuff"],
    "ca2fl": ["algorithm.name=ca2fl"],
    "fadas": ["algorithm.name=fadas"],
    "asyncsgd": ["algorithm.name=asyncsgd"],
    "port": ["algorithm.name=port"],
    "fedstaleweight": ["algorithm.name=fedstaleweight"],
}


def buffer(d: int, k: int, version: int, models: dict, gen: torch.Generator) -> list[BufferedUpdate]:
    """K updates, update j from version ``version − j`` (staleness j), each its base plus a small random delta."""
    return [BufferedUpdate(device=j, job=version * k + j, n_samples=100, base_version=version - j, epochs=1,
                           flat=models[version - j] + 1e-3 * torch.randn(d, generator=gen)) for j in range(k)]


def time_rule(overrides: list[str], d: int, k: int, repeats: int) -> tuple[float, int]:
    """(median seconds of one aggregation, rule and optimizer state bytes after the last one)."""
    cfg = config_from_dict({}, [*overrides, f"algorithm.buffer_size={k}", f"devices.concurrency={max(k, 20)}"])
    alg = cfg.algorithm
    gen = torch.Generator().manual_seed(0)
    models = {v: torch.randn(d, generator=gen) for v in range(k)}
    memory, opt = memory_of(alg), ServerOptimizer(alg)
    times = []
    for t in range(k - 1, k + repeats):
        ups = buffer(d, k, t, models, gen)
        start = time.perf_counter()
        result = aggregate(alg, t, models[t], ups, models.__getitem__, memory=memory)
        models[t + 1] = opt.apply(models[t], result, ups, models.__getitem__)
        elapsed = time.perf_counter() - start
        if t >= k:  # the first one fills the states
            times.append(elapsed)
        models.pop(t - k, None)  # the versions no update can start from any more
    opt_state = opt.state_dict() or {}
    state = state_size(memory.state)["bytes"] + state_size(opt_state)["bytes"]
    return statistics.median(times), state


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--k", type=int, default=10, help="K, the buffer's updates")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"| model (d) | rule | one aggregation, K = {args.k} | × FedBuff | checkpoint grows by |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        d = SIZES[size]
        base = None
        for name, overrides in RULES.items():
            seconds, state = time_rule(overrides, d, args.k, args.repeats)
            base = seconds if base is None else base
            print(f"| {size} ({d:,}) | {name} | {seconds * 1e3:.1f} ms | {seconds / base:.2f} | {state / 1e6:.2f} MB |",
                  flush=True)
    print("\n| CA²FL cache | devices D | memory | disk (checkpoints kept + 1) |\n|---|---|---|---|")
    for size, devices in (("resnet18", 100), ("lenet5", 10_000), ("lenet5", 1_000_000)):
        d = SIZES[size]
        print(f"| {size} ({d:,}) | {devices:,} | {cache_bytes(devices, d) / 1e9:.2f} GB | "
              f"{disk_bytes(devices, d) / 1e9:.2f} GB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
