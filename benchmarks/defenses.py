"""What each defense (algorithm.defense) costs the server, side by side (issue 65, item 4): one aggregation's time
as a ratio to FedBuff's, at K = 10 and K = 50, on LeNet-5's and ResNet-18's flat vectors.

    python benchmarks/defenses.py [--repeats 7] [--sizes lenet5 resnet18] [--k 10 50] [--threads 1] \
        [--defenses krum median ...]

Per size and K it builds one buffer of K updates of random deltas (1e-3 · N(0, 1)) from staggered bases (update j
from version t − j), and times algo/dispatch.py's ``aggregate`` on it as the server calls it (with the server's
norm history and the rule's memory, so the norms every run measures are in every row, FedBuff's included), each
defense on the same buffer: warmed up once, then the median of ``--repeats`` aggregations, taken in rounds of one
aggregation per defense so a shared machine's load falls on all alike (centered clipping's centre carried between
them). Filters run under FedBuff (the rule then averages what they keep). The aims
(issue 65): median and trimmed mean within 5× FedBuff at K = 10; Krum, Multi-Krum and Bulyan, whose distances are
O(K²d), within K×. Each row says whether it met its aim.

FLTrust and Zeno++ are timed on the aggregation alone: their server-held computation (FLTrust's g_0, one job of
training on the server-held set; Zeno++'s v, one gradient on it) is a fixed random vector here (:class:`GivenServer`),
since its cost is that of training the model on ``server_samples`` rows, not of the flat vectors (docs/robustness.md
gives a run's wall time with it).

AsyncFilter screens a staleness group of at least 3: on the staggered buffer every group holds one update and it
screens none. ``--bases same`` puts every update on w_t (one group of K at staleness 0: its dearest case, a mean,
a distance per update and the exact 3-means of K numbers).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from seafl_dist.algo import BufferedUpdate, aggregate, memory_of
from seafl_dist.algo.guard import NormHistory
from seafl_dist.settings import config_from_dict

SIZES = {"lenet5": 61_706, "resnet18": 11_173_962}
DEFENSES = {  # name: overrides; FedBuff first (the baseline). f = 1 throughout (Bulyan needs K ≥ 7)
    "fedbuff": [],
    "krum": ["algorithm.defense.name=krum", "algorithm.defense.f=1"],
    "multikrum": ["algorithm.defense.name=multikrum", "algorithm.defense.f=1"],
    "median": ["algorithm.defense.name=median"],
    "trimmed_mean": ["algorithm.defense.name=trimmed_mean", "algorithm.defense.beta=0.1"],
    "bulyan": ["algorithm.defense.name=bulyan", "algorithm.defense.f=1"],
    "centered_clipping": ["algorithm.defense.name=centered_clipping", "algorithm.defense.tau=0.05"],
    "fltrust": ["algorithm.defense.name=fltrust", "algorithm.defense.server_samples=100"],
    "zenopp": ["algorithm.defense.name=zenopp", "algorithm.defense.server_samples=100"],
    "asyncfilter": ["algorithm.defense.name=asyncfilter"],
}


class GivenServer:
    """The server-held set's computations as one fixed random vector (1e-3 · N(0, 1)): g_0 and v alike."""

    def __init__(self, d: int):
        self.vector = 1e-3 * torch.randn(d, generator=torch.Generator().manual_seed(1))

    def update(self, version, global_flat):
        return self.vector

    def gradient(self, version, global_flat):
        return self.vector


def aim(name: str, k: int) -> float | None:
    """The ratio to FedBuff a defense should stay within (None: no aim at this K)."""
    if name in ("median", "trimmed_mean"):
        return 5.0 if k == 10 else None
    if name in ("krum", "multikrum", "bulyan"):
        return float(k)
    return None


def timed(configs: dict, models: dict, ups: list[BufferedUpdate], t: int, repeats: int) -> dict[str, float]:
    """{defense: median seconds of one aggregation}: each warmed up once, then ``repeats`` rounds, every defense once
    a round in turn, so a load that comes and goes on a shared machine falls on all of them alike."""
    memories = {name: memory_of(cfg.algorithm) for name, cfg in configs.items()}
    for memory in memories.values():
        memory.server = GivenServer(models[t].numel())
    times: dict[str, list] = {name: [] for name in configs}
    for r in range(repeats + 1):
        for name, cfg in configs.items():
            start = time.perf_counter()
            aggregate(cfg.algorithm, t, models[t], ups, models.__getitem__, history=NormHistory(),
                      memory=memories[name])
            if r:  # round 0 warms up (and fills centered clipping's centre)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--k", nargs="+", type=int, default=[10, 50], help="K, the buffer's updates")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bases", choices=["staggered", "same"], default="staggered",
                   help="update j from version t − j (staggered), or every update from t (same)")
    p.add_argument("--defenses", nargs="+", default=list(DEFENSES)[1:], choices=list(DEFENSES)[1:],
                   help="the defenses to time (FedBuff, the baseline, always runs)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"CPU: {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"median of {args.repeats} aggregations after one warm-up, {args.bases} bases\n")
    columns = [(size, k) for size in args.sizes for k in args.k]
    results: dict = {}
    for size, k in columns:
        d = SIZES[size]
        gen = torch.Generator().manual_seed(0)
        models = {v: torch.randn(d, generator=gen) for v in range(k)}
        t = k - 1
        base = (lambda j: t - j) if args.bases == "staggered" else (lambda j: t)
        ups = [BufferedUpdate(device=j, job=j, n_samples=100, base_version=base(j), epochs=1,
                              flat=models[base(j)] + 1e-3 * torch.randn(d, generator=gen)) for j in range(k)]
        configs = {name: config_from_dict({}, ["algorithm.name=fedbuff", f"algorithm.buffer_size={k}",
                                                f"devices.concurrency={max(k, 20)}", *overrides])
                   for name, overrides in DEFENSES.items() if name == "fedbuff" or name in args.defenses}
        for name, seconds in timed(configs, models, ups, t, args.repeats).items():
            results[name, size, k] = seconds
            print(f"  {size} K={k} {name}: {seconds * 1e3:.1f} ms", flush=True)
        del models, ups
    head = " | ".join(f"{size} ({SIZES[size]:,}), K = {k}" for size, k in columns)
    print(f"\n| defense | {head} |\n|---|{'---|' * len(columns)}")
    for name in [n for n in DEFENSES if n == "fedbuff" or n in args.defenses]:
        cells = []
        for size, k in columns:
            s, base = results[name, size, k], results["fedbuff", size, k]
            ratio, goal = s / base, aim(name, k)
            mark = "" if goal is None else f" (aim ≤ {goal:g}×: {'met' if ratio <= goal else 'MISSED'})"
            cells.append(f"{s * 1e3:.1f} ms, {ratio:.2f}×{mark}")
        print(f"| {name} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
