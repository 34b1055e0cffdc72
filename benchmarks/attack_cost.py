"""What an omniscient attack costs rank 0 at each aggregation (issue 65, item 1): the time of
``Threats.landed`` (the honest deltas taken, the crafted delta computed, the malicious models rebuilt) as a
ratio to FedBuff's aggregation of the same buffer.

    python benchmarks/attack_cost.py [--repeats 3] [--sizes lenet5 resnet18] [--k 10] [--malicious 2]

A buffer of K updates of random deltas on staggered bases (LeNet-5's 61,706 and ResNet-18's 11,173,962 entries,
float32), ``--malicious`` of them from malicious devices; each attack is warmed up once and timed over
``--repeats`` more; the median is printed beside FedBuff's (algo/dispatch.py ``aggregate``) and their ratio.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from seafl_dist.algo import BufferedUpdate, aggregate
from seafl_dist.settings import config_from_dict
from seafl_dist.threats import Threats

SIZES = {"lenet5": 61_706, "resnet18": 11_173_962}


def median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES))
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--malicious", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    k = args.k
    print(f"K = {k}, {args.malicious} malicious, one thread; median of {args.repeats}")
    print("| model | attack | landed (s) | FedBuff (s) | ratio |\n|---|---|---|---|---|")
    for name in args.sizes:
        d = SIZES[name]
        g = torch.Generator().manual_seed(0)
        bases = {v: torch.randn(d, generator=g) for v in range(k)}
        ups = [BufferedUpdate(device=i, job=i, flat=bases[i] + 0.01 * torch.randn(d, generator=g), n_samples=100,
                              base_version=i, epochs=1) for i in range(k)]
        fb = config_from_dict({}, ["algorithm.name=fedbuff", f"algorithm.buffer_size={k}", f"devices.num={k}",
                                f"devices.concurrency={k}"])
        fedbuff = median_time(lambda: aggregate(fb.algorithm, k - 1, bases[k - 1], ups, bases.__getitem__),
                              args.repeats)
        for attack in ("alie", "ipm", "min_max", "min_sum"):
            cfg = config_from_dict({}, [f"threats.malicious_devices={list(range(args.malicious))}",
                                     f"threats.attack={attack}", f"algorithm.buffer_size={k}", f"devices.num={k}",
                                     f"devices.concurrency={k}"])
            threats = Threats(cfg, k, torch.ones(d, dtype=torch.bool))
            event = {"updates": [{"device": u.device} for u in ups]}
            t = median_time(lambda: threats.landed(event, ups, bases.__getitem__), args.repeats)
            print(f"| {name} | {attack} | {t:.4f} | {fedbuff:.4f} | {t / fedbuff:.1f}× |", flush=True)


if __name__ == "__main__":
    main()
