"""The GPU levers A/B, one flag each, measured side by side on one warm GPU (docs/performance.md).

    python benchmarks/gpu_levers.py                 # ResNet-18 (CIFAR size) and LeNet-5 (MNIST size)
    python benchmarks/gpu_levers.py --smoke         # tiny sizes on the CPU: the rows that need no GPU

Each row is local training of G jobs of real shard size (500 CIFAR images, 600 MNIST images, batch
32, as the paper's devices) through the code the runtime runs, with one lever changed from the
row above or from the default, in images/s:

- fused vmap, G = 10 (runtime.cuda_graphs=false: the path before graphs);
- eager, one job at a time, NCHW (train_job without channels-last) and channels-last (the fallback);
- graphs: G = 1, 4, 8, 16 slots (streams); without per-epoch batch preparation (one gather per
  batch); NCHW instead of channels-last; bf16 autocast; runtime.deterministic;
- the ceiling: one model at batch 640 (G = 20 x 32), bare eager, NCHW and channels-last;
- the result's way to the host: one contiguous copy vs one copy per tensor (ms per ResNet-18).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import gpu_throughput as gt  # benchmarks/, on sys.path when run as a script
from seafl_dist.train import flatten, train_job
from seafl_dist.train import graphed


def eager_jobs(name, width, g, steps, device, data, channels_last=True) -> float:
    """G jobs one after another through train_job (the eager path), images/s."""
    c, s = gt.MODELS[name]
    net = gt.build_model(name, 10, c, width=width, image_size=s, lightning=False)
    if not channels_last:
        net.channels_last = False
    start = flatten(net)
    idx = torch.arange(steps * 32) % len(data)

    def run():
        for j in range(g):
            train_job(net, start, data, idx, epochs=1, batch_size=32, seed=j, augment=c == 3, device=device)
    run()
    gt.sync(device)
    t0 = time.perf_counter()
    run()
    gt.sync(device)
    return g * steps * 32 / (time.perf_counter() - t0)


def graphs(name, width, g, steps, device, data, precision="32", channels_last=True, prep=graphed.PREP_BATCHES):
    old = graphed.PREP_BATCHES
    graphed.PREP_BATCHES = prep  # 1: each batch's images gathered alone, as train_job does
    try:
        return gt.ours(name, width, g, steps, device, precision, data, path="graphs", channels_last=channels_last)
    finally:
        graphed.PREP_BATCHES = old


def deterministic(fn):
    from seafl_dist.runtime import determinism
    determinism.apply()
    try:
        return fn()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False


def copy_ms(width, device, one_copy: bool) -> float:
    """Milliseconds to bring a trained ResNet-18's state to the host."""
    net = gt.build_model("resnet18", 10, 3, width=width, image_size=32, lightning=False).to(device)
    tensors = list(net.state_dict().values())

    def once():
        if one_copy:
            return flatten(net)
        return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])
    return 1000 * gt.timed(once, device, min_s=0.5)


def rows(args, device):
    cuda = device.type == "cuda"
    for name, steps in (("resnet18", 16), ("lenet5", 19)):
        data = gt.synthetic(name, args.images, device)
        w = args.width
        for cl in (False, True):  # the most batching can give: one model at batch 20 x 32
            yield name, f"ceiling, bare eager batch 640{', channels-last' if cl else ''}", lambda cl=cl: gt.bare_eager(
                name, w, 640, device, cl, min_s=args.min_s)
        yield name, "fused vmap, G=10 (cuda_graphs=false)", lambda: gt.ours(name, w, 10, steps, device, "32", data,
                                                                            path="fused")
        yield name, "eager train_job x 8, NCHW", lambda: eager_jobs(name, w, 8, steps, device, data, False)
        yield name, "eager train_job x 8, channels-last", lambda: eager_jobs(name, w, 8, steps, device, data)
        if not cuda:
            continue
        for g in args.groups:
            yield name, f"graphs G={g}", lambda g=g: graphs(name, w, g, steps, device, data)
        g = args.ab_group
        yield name, f"graphs G={g}, a gather per batch", lambda: graphs(name, w, g, steps, device, data, prep=1)
        yield name, f"graphs G={g}, NCHW", lambda: graphs(name, w, g, steps, device, data, channels_last=False)
        yield name, f"graphs G={g}, bf16", lambda: graphs(name, w, g, steps, device, data, precision="bf16")
        yield name, f"graphs G={g}, deterministic", lambda: deterministic(lambda: graphs(name, w, g, steps, device,
                                                                                          data))
        yield name, f"graphs G={g}, bf16, deterministic", lambda: deterministic(
            lambda: graphs(name, w, g, steps, device, data, precision="bf16"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, on the CPU: a check of this script")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--groups", default="1,4,8,16", help="G values of the graph rows")
    p.add_argument("--ab-group", type=int, default=8, help="G of the one-lever rows")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    args.groups = [int(g) for g in args.groups.split(",")]
    args.width, args.images, args.min_s = (0.125, 512, 0.05) if args.smoke else (1.0, 50_000, 1.0)
    if args.smoke:
        torch.set_num_threads(1)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"device: {gpu}; torch {torch.__version__}; model width {args.width}", flush=True)
    print(f"{'model':<9} {'lever':<42} {'images/s':>10}")
    t0 = time.perf_counter()
    for name, what, fn in rows(args, device):
        ips = gt.try_oom(fn, f"{name} {what}", 1)
        print(f"{name:<9} {what:<42} {ips if ips else float('nan'):>10,.0f}", flush=True)
    for one in (False, True):
        ms = copy_ms(args.width, device, one)
        print(f"{'resnet18':<9} {'result to host, ' + ('one copy' if one else 'a copy per tensor') + ' (ms)':<42} "
              f"{ms:>10.2f}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
