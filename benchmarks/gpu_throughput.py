"""Images per second of local training on one GPU: bare PyTorch loops vs ours with runtime.batch_jobs = G.

    python benchmarks/gpu_throughput.py                     # one GPU, <= 5 minutes
    python benchmarks/gpu_throughput.py --smoke             # tiny sizes, any device (CPU: a test)
    python benchmarks/gpu_throughput.py --models resnet18 --groups 1,20 --channels-last

For CIFAR ResNet-18, CIFAR VGG-16 and MNIST LeNet-5 (synthetic images; the data format does
not change the arithmetic), side by side from one run:

- bare eager: a plain loop, batch 32, SGD with momentum 0.9 (forward, loss, zero_grad,
  backward, step) on one fixed batch already on the GPU;
- bare graph: the same step captured as one CUDA graph (GPU only);
- ceiling G: one model at batch G x 32, the most batching can give (fp32 and bf16);
- ours G: what a rank runs for runtime.batch_jobs = G -- on a GPU G CUDA-graph slots
  (train/graphed.py), on a CPU ``seafl_dist.train.train_jobs`` (G = 1: ``train_job``): G jobs,
  each with its own start model, shard, seeded batch order and augmentation (CIFAR), drawn from
  the dataset in GPU memory; fp32 and bf16 autocast;
- a full in-process run through the real server (``Server`` + ``InProcessExecutor``) for
  ResNet-18 with runtime.batch_jobs = 20 and = 1 (100 devices x 500 images, 20 in flight, K = 10,
  E = 5: the issue's workload), counting every image trained.

Each figure is images/s and its ratio to the fp32 ceiling of the same G (bare rows: G = 20).
Out of GPU memory at a large G prints one line naming runtime.batch_jobs and a G that fits.
``--channels-last`` converts the bare loops' model and inputs (ours stays in vmap's layout).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from seafl_dist.data import ArrayDataset
from seafl_dist.models import build_model
from seafl_dist.train import flatten, train_jobs
from seafl_dist.train.graphed import Slot, train_slots

from gpu_full_run import full_run, write_cifar  # benchmarks/, on sys.path when run as a script

MODELS = {"resnet18": (3, 32), "vgg16": (3, 32), "lenet5": (1, 28)}  # channels, image size


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup=3, min_s=1.0, max_iters=10_000) -> float:
    """Seconds per call of ``fn`` (after warm-up), repeated for at least ``min_s``."""
    for _ in range(warmup):
        fn()
    sync(device)
    t0, n = time.perf_counter(), 0
    while n < max_iters:
        fn()
        n += 1
        if n % 5 == 0:
            sync(device)
            if time.perf_counter() - t0 >= min_s:
                break
    sync(device)
    return (time.perf_counter() - t0) / n


def bare_net(name, width, device, channels_last):
    c, s = MODELS[name]
    net = build_model(name, 10, c, width=width, image_size=s, lightning=False).to(device).train()
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    return net, opt


def bare_batch(name, batch, device, channels_last):
    c, s = MODELS[name]
    x = torch.randn(batch, c, s, s, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 10, (batch,), device=device)


def bare_eager(name, width, batch, device, channels_last, bf16=False, min_s=1.0) -> float:
    net, opt = bare_net(name, width, device, channels_last)
    x, y = bare_batch(name, batch, device, channels_last)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type == "cuda"):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return batch / timed(step, device, min_s=min_s)


def bare_graph(name, width, batch, device, channels_last, min_s=1.0) -> float:
    """The whole step (forward, backward, SGD) replayed as one CUDA graph (the PyTorch docs' recipe)."""
    net, opt = bare_net(name, width, device, channels_last)
    x, y = bare_batch(name, batch, device, channels_last)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return batch / timed(graph.replay, device, min_s=min_s)


def synthetic(name, n, device, seed=0) -> ArrayDataset:
    c, s = MODELS[name]
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, c, s, s), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return ArrayDataset(images, labels, 10, "synthetic", (0.5,) * c, (0.25,) * c).to(device)


def ours(name, width, g, steps, device, precision, data, batch=32, path=None, channels_last=True) -> float:
    """G jobs of ``steps`` steps each as the runtime trains them, images/s. ``path``: "graphs" (the
    GPU default: G CUDA-graph slots, train/graphed.py), "fused" (G jobs in one vmap step,
    runtime.cuda_graphs=false; G = 1: train_job), or None for the runtime's choice on ``device``.
    ``channels_last=False``: the model trains in NCHW (an A/B lever)."""
    c, s = MODELS[name]
    path = path or ("graphs" if device.type == "cuda" else "fused")
    net = build_model(name, 10, c, width=width, image_size=s, lightning=False)
    net.channels_last = channels_last and net.channels_last
    starts = []
    for j in range(g):
        torch.manual_seed(j)
        starts.append(flatten(build_model(name, 10, c, width=width, image_size=s, lightning=False)))
    per_job = steps * batch
    shards = [torch.arange(j * per_job, (j + 1) * per_job) % len(data) for j in range(g)]
    augment = c == 3
    if path == "graphs":
        slots = [Slot(net, data, batch, device, precision) for _ in range(g)]

        def run(epochs):
            train_slots(slots, starts, data, shards, epochs=[epochs] * g, batch_size=batch, seeds=list(range(g)),
                        augment=augment)
    else:
        def run(epochs):
            train_jobs(net, starts, data, shards, epochs=[epochs] * g, batch_size=batch, seeds=list(range(g)),
                       augment=augment, device=device, precision=precision)
    run(1)  # warm-up: vmap tracing, cuDNN's algorithm choice
    sync(device)
    t0 = time.perf_counter()
    run(1)
    sync(device)
    return g * per_job / (time.perf_counter() - t0)


def profile(name, width, g, steps, device, precision, data, rows=14) -> None:
    """Where ours' time goes: torch.profiler over one timed call of ``ours`` (after its warm-up),
    the top operators by time on the device, and how busy the device was over the wall time."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    ours(name, width, g, steps, device, precision, data)  # warm-up outside the profile
    with torch_profile(activities=activities) as prof:
        t0 = time.perf_counter()
        ips = ours(name, width, g, steps, device, precision, data)
        wall = time.perf_counter() - t0
    stats = prof.key_averages()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    busy = sum(getattr(e, key) for e in stats) / 1e6
    print(f"\nprofile: {name} ours G={g} {precision}, {steps} steps per job: {ips:,.0f} images/s while profiled; "
          f"wall {wall:.2f} s (warm-up and timed call), self {'device' if device.type == 'cuda' else 'CPU'} time "
          f"{busy:.2f} s", flush=True)
    print(stats.table(sort_by=key, row_limit=rows), flush=True)


def out_of_memory_line(what: str, g: int) -> str:
    fits = max(1, g // 2)
    return f"  {what}: out of GPU memory at G={g}; set runtime.batch_jobs={fits} or less"


def try_oom(fn, what, g):
    try:
        return fn()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        print(out_of_memory_line(what, g))
        return None


def bench_model(name, args, device) -> list[tuple]:
    width = args.width
    rows = []
    ref_g = 20 if 20 in args.groups else max(args.groups)
    ceilings, ceilings_bf16 = {}, {}
    for g in sorted(set(args.groups) | {ref_g}):
        ceilings[g] = try_oom(lambda: bare_eager(name, width, 32 * g, device, args.channels_last, min_s=args.min_s),
                              f"{name} ceiling", g)
        if g == ref_g and device.type == "cuda":
            ceilings_bf16[g] = try_oom(lambda: bare_eager(name, width, 32 * g, device, args.channels_last, bf16=True,
                                                          min_s=args.min_s), f"{name} ceiling bf16", g)
    rows.append((name, "bare eager, batch 32", bare_eager(name, width, 32, device, args.channels_last, min_s=args.min_s),
                 ceilings[ref_g], ref_g))
    if device.type == "cuda":
        rows.append((name, "bare CUDA graph, batch 32",
                     bare_graph(name, width, 32, device, args.channels_last, min_s=args.min_s), ceilings[ref_g], ref_g))
    for g in sorted(set(args.groups) | {ref_g}):
        rows.append((name, f"bare ceiling, batch {32 * g} (G={g})", ceilings[g], ceilings[g], g))
    if device.type == "cuda":
        rows.append((name, f"bare ceiling bf16, batch {32 * ref_g}", ceilings_bf16.get(ref_g), ceilings[ref_g], ref_g))
    data = synthetic(name, args.images, device)
    for precision in ("32", "bf16") if device.type == "cuda" else ("32",):
        for g in args.groups:
            steps = max(args.steps, args.g1_steps // g)
            ips = try_oom(lambda: ours(name, width, g, steps, device, precision, data), f"{name} ours", g)
            rows.append((name, f"ours G={g}" + (" bf16" if precision == "bf16" else ""), ips, ceilings.get(g), g))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, for a CPU check of this script")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="resnet18,vgg16,lenet5")
    p.add_argument("--groups", default=None, help="G values for ours (default 1,4,10,20; --smoke: 1,2,4)")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--no-full-run", action="store_true")
    p.add_argument("--full-groups", default=None, help="runtime.batch_jobs of the full runs (default 20,1; --smoke: 4,1)")
    p.add_argument("--profile", default=None, metavar="MODEL:G",
                   help="only profile ours for MODEL at G (e.g. resnet18:20): the top operators, device busy time")
    args = p.parse_args(argv)
    args.groups = [int(g) for g in (args.groups or ("1,2,4" if args.smoke else "1,4,10,20")).split(",")]
    device = torch.device(args.device)
    if args.smoke:
        args.width, args.steps, args.g1_steps, args.images, args.min_s = 0.125, 2, 4, 512, 0.05
        args.full_scale = dict(devices=8, concurrency=4, k=2, aggs=2, aggs_g1=2, epochs=1, n_train=400, n_test=100)
        torch.set_num_threads(1)
    else:
        args.width, args.steps, args.g1_steps, args.images, args.min_s = 1.0, 8, 160, 50_000, 1.0
        args.full_scale = dict(devices=100, concurrency=20, k=10, aggs=6, aggs_g1=3, epochs=5, n_train=50_000,
                               n_test=10_000)
    args.full_precision = "32"
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"device: {gpu}; torch {torch.__version__}; model width {args.width}; channels_last={args.channels_last}",
          flush=True)
    t_start = time.perf_counter()
    if args.profile:
        name, g = args.profile.split(":")
        g = int(g)
        profile(name, args.width, g, max(args.steps, args.g1_steps // g), device, "32",
                synthetic(name, args.images, device))
        return 0
    header = f"{'model':<9} {'what':<36} {'images/s':>10} {'/ ceiling':>9}"
    print(header)
    for name in filter(None, args.models.split(",")):  # --models "": the full runs only
        for model, what, ips, ceiling, _g in bench_model(name, args, device):
            ratio = f"{ips / ceiling:9.2f}" if ips and ceiling else f"{'-':>9}"
            print(f"{model:<9} {what:<36} {ips if ips else float('nan'):>10,.0f} {ratio}", flush=True)
    if not args.no_full_run:
        with tempfile.TemporaryDirectory() as root:
            s = args.full_scale
            write_cifar(Path(root), s["n_train"], s["n_test"])
            for g in [int(g) for g in (args.full_groups or ("4,1" if args.smoke else "20,1")).split(",")]:
                try:
                    ips, jobs, wall = full_run(args, g, Path(root), device)
                except torch.cuda.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    print(out_of_memory_line("full run", g))
                    continue
                print(f"{'resnet18':<9} {f'full in-process run, G={g}':<36} {ips:>10,.0f} {'-':>9}"
                      f"   ({jobs} jobs, {wall:.1f} s wall incl. evaluation)", flush=True)
    print(f"total {time.perf_counter() - t_start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
