"""W1 on a CPU: ``torchrun`` W = 3 against two bare PyTorch processes doing the same SGD steps.

    python benchmarks/w1_overhead.py [--repeat 3] [--data-root /path/with/MNIST/raw]

W1 (issue 10): 100 devices x 600 MNIST-format images, LeNet-5, E = 5, B = 32, lr 0.01 (momentum
0.9, as configs/mnist_prelim.yaml), FedAvg with 20 devices per round, 10 rounds, evaluation
every round: 200 jobs of 95 SGD steps each. Measured side by side, ``--repeat`` interleaved
rounds (the order alternates; a shared VM drifts), medians printed:

(a) ``OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=3 -m seafl_dist run`` with
    ``runtime.threads=1`` (rank 0 schedules, aggregates, evaluates; two workers train): the wall
    time of the whole command;
(b) two bare Python processes started together, 1 thread each, each training exactly half of
    the jobs the run aggregated (their sample counts and epochs read from the run's trace;
    plain ``nn.Module`` LeNet-5, SGD, cross-entropy, the same batch sizes and the same dropped
    last batch of one as ``train_job``), each loading the IDX training images itself: the wall
    time until the later one exits (benchmarks/w1_bare.py).

Ratio (a)/(b); the goal is <= 1.05. Where the difference goes, from what can be measured
outside the runtime: start-up (the bare processes report their time to first step; for (a) the
command's wall time minus the server loop's ``wall_time_s``), rank 0's evaluation (one
evaluation of the 10,000 test images, timed here in this process on 1 thread, times the
evaluations the run did), and the FedAvg round barrier: with ``runtime.placement=device`` (device
k on worker 1 + k mod 2) a round's 20 jobs rarely split 10/10 and the worker with fewer waits;
the default ``balanced`` placement splits them evenly. The trace, with the runtime's placement
replayed, gives the jobs on each round's busier worker, summed (the critical path), against the
even half of (b).

Real MNIST is read from ``--data-root``/MNIST/raw (default ./data); when those files are absent,
synthetic images in the same IDX format (60,000 + 10,000, random pixels) are written to a
temporary directory and used for both. A script, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from w1_bare import mnist_or_synthetic  # beside this script

ROOT = Path(__file__).resolve().parents[1]
W1 = ["algorithm.name=fedavg", "devices.num=100", "devices.concurrency=20", "data.samples_per_device=600",
      "train.epochs=5", "train.batch_size=32", "train.lr=0.01", "run.max_aggregations=10", "run.eval_every=1",
      "run.target_accuracy=null", "runtime.threads=1", "runtime.device=cpu", "logging.progress=none"]


# ---- the driver -----------------------------------------------------------------------------

def run_torchrun(data_root: Path, out: Path, world: int, extra: list[str],
                 src: str | None = None) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    if src:  # another checkout's seafl_dist (--baseline-src), for a before/after in one run; ``-m`` puts
        # the working directory first on sys.path, so the ranks run there too
        env["PYTHONPATH"] = os.pathsep.join([src, *[p for p in [env.get("PYTHONPATH")] if p]])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", "-m",
           "seafl_dist", "run", str(ROOT / "configs" / "mnist_prelim.yaml"), f"data.root={data_root}", *W1, *extra,
           "--out", str(out)]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=src or ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        cpu = {}
        while proc.poll() is None:
            cpu.update(rank_cpu(proc.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            sys.exit(f"torchrun failed ({proc.returncode}):\n{err.read()[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    summary["cpu"] = cpu
    return wall, summary


def rank_cpu(launcher: int) -> dict[str, float]:
    """CPU seconds so far of the launcher and of each rank (its children, named by RANK), from /proc;
    sampled, so the last fraction of a second of each is missed. Empty where there is no /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            pid, ppid = int(d.name), int(fields[1])
            if pid == launcher:
                out["launcher"] = (int(fields[11]) + int(fields[12])) / tick
            elif ppid == launcher:
                env = (d / "environ").read_bytes().split(b"\0")
                rank = next((e[5:].decode() for e in env if e.startswith(b"RANK=")), None)
                if rank is not None:  # the launcher's other helpers use next to nothing
                    out[f"rank {rank}"] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


def trace_jobs(run: Path, world: int, placement: str) -> tuple[list[list[int]], int, list[int]]:
    """The aggregated jobs' [n_samples, epochs]; the sum over rounds of the busiest worker's jobs;
    jobs per worker. Which worker trained a job is replayed with the runtime's own Placement: in a
    FedAvg round every job goes out at once, after the last round's results came back."""
    from seafl_dist.runtime.distributed import Placement

    jobs, critical, per_worker = [], 0, [0] * (world - 1)
    for line in (run / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "aggregate":
            updates = sorted(ev["updates"], key=lambda u: u["job"])  # dispatch order
            n = {u["device"]: u["n_samples"] for u in updates}
            place = Placement(placement, world, [n.get(d, 0) for d in range(max(n) + 1)], 32)
            count = [0] * (world - 1)
            for u in updates:
                jobs.append([u["n_samples"], u["epochs"]])
                count[place.pick(u["job"], u["device"], u["epochs"]) - 1] += 1
            critical += max(count)
            per_worker = [a + b for a, b in zip(per_worker, count)]
    return jobs, critical, per_worker


def run_bare(data_root: Path, jobs_files: list[Path], args) -> tuple[float, list[dict]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0_epoch, t0 = time.time(), time.perf_counter()
    bare = str(Path(__file__).with_name("w1_bare.py"))
    procs = [subprocess.Popen([sys.executable, bare, "--index", str(i), "--jobs", str(f),
                               "--data-root", str(data_root), "--lr", "0.01", "--momentum", "0.9"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, f in enumerate(jobs_files)]
    reports = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"bare process failed ({p.returncode}):\n{err[-3000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - t0
    for r in reports:
        r["to_first_step"] = r["first_step"] - t0_epoch
        r["wall"] = r["end"] - t0_epoch
    return wall, reports


def eval_seconds(data_root: Path) -> float:
    """One evaluation of the global model on the test set, as rank 0 does it, on 1 thread here."""
    import torch

    from seafl_dist.settings import TrainConfig
    from seafl_dist.data import load_dataset
    from seafl_dist.models import build_model
    from seafl_dist.train import evaluate, flatten

    torch.set_num_threads(1)
    test = load_dataset("mnist", root=data_root, train=False)
    model = build_model("lenet5", 10, 1, image_size=28, optim=TrainConfig())
    flat = flatten(model)
    evaluate(model, flat, test)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        evaluate(model, flat, test)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds; medians are printed")
    ap.add_argument("--world", type=int, default=3, help="torchrun ranks: one server and world-1 workers")
    ap.add_argument("--data-root", default=str(ROOT / "data"), help="holds MNIST/raw/ (IDX files, gzipped or not)")
    ap.add_argument("--baseline-src", help="also time (a) with the seafl_dist of this checkout, interleaved")
    ap.add_argument("overrides", nargs="*", help="extra dotted config overrides for (a), e.g. runtime.batch_jobs=2")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_root, source = mnist_or_synthetic(args.data_root, tmp)
        load_before = os.getloadavg()[0]
        walls = {"torchrun": [], "bare": []} | ({"baseline": []} if args.baseline_src else {})
        loops, bare_reports, jobs_files, cpus, base_cpus = [], [], None, {}, {}
        for rnd in range(args.repeat):
            order = [k for k in walls if k != "bare"] + ["bare"]
            if rnd % 2:
                order.reverse()
            for kind in order:
                print(f"round {rnd + 1}/{args.repeat}: {kind} ...", file=sys.stderr, flush=True)
                if kind == "torchrun":
                    wall, summ = run_torchrun(data_root, tmp / f"run-{rnd}", args.world, args.overrides)
                    loops.append(summ["wall_time_s"])
                    for k, v in summ["cpu"].items():
                        cpus.setdefault(k, []).append(v)
                    if jobs_files is None:
                        placement = next((o.split("=", 1)[1] for o in args.overrides
                                          if o.startswith("runtime.placement=")), "balanced")
                        jobs, critical, per_worker = trace_jobs(tmp / "run-0", args.world, placement)
                        jobs_files = []
                        for i in range(args.world - 1):  # job j to process j mod (W-1): equal halves
                            jobs_files.append(tmp / f"jobs-{i}.json")
                            jobs_files[-1].write_text(json.dumps(jobs[i::args.world - 1]))
                        events = summ["events"]
                    print(f"  {wall:.1f}s command, {summ['wall_time_s']:.1f}s server loop", file=sys.stderr)
                elif kind == "baseline":
                    wall, base = run_torchrun(data_root, tmp / f"base-{rnd}", args.world, args.overrides,
                                              args.baseline_src)
                    for k, v in base["cpu"].items():
                        base_cpus.setdefault(k, []).append(v)
                    print(f"  {wall:.1f}s command (baseline {args.baseline_src})", file=sys.stderr)
                else:
                    wall, reports = run_bare(data_root, jobs_files, args)
                    bare_reports.append(reports)
                    print(f"  {wall:.1f}s (" + ", ".join(f"{r['wall']:.1f}s" for r in reports) + ")", file=sys.stderr)
                walls[kind].append(wall)
        ev_s = eval_seconds(data_root)
    load_after = os.getloadavg()[0]

    med = {k: statistics.median(v) for k, v in walls.items()}
    loop = statistics.median(loops)
    steps = [r["steps"] for r in bare_reports[0]]
    first = statistics.median(max(r["to_first_step"] for r in reps) for reps in bare_reports)
    per_job = statistics.median(max(r["wall"] - r["to_first_step"] for r in reps) / max(r["jobs"] for r in reps)
                                for reps in bare_reports)
    half = len(jobs) / (args.world - 1)
    print(f"W1: {len(jobs)} jobs ({events['aggregate']} FedAvg rounds of 20), LeNet-5, E=5, B=32; {source}; "
          f"{os.cpu_count()} CPUs; load average (1 min) {load_before:.2f} before, {load_after:.2f} after; "
          f"medians of {args.repeat} interleaved rounds")
    print(f"(a) torchrun W={args.world}, 1 thread/rank, whole command : {med['torchrun']:7.1f} s  "
          f"(runs: {', '.join(f'{w:.1f}' for w in walls['torchrun'])})")
    print(f"(b) {args.world - 1} bare processes, {'/'.join(map(str, steps))} SGD steps : {med['bare']:7.1f} s  "
          f"(runs: {', '.join(f'{w:.1f}' for w in walls['bare'])})")
    print(f"ratio (a)/(b) = {med['torchrun'] / med['bare']:.3f}   (goal <= 1.05)")
    if args.baseline_src:
        print(f"(a) with the seafl_dist of {args.baseline_src}              : {med['baseline']:7.1f} s  "
              f"(runs: {', '.join(f'{w:.1f}' for w in walls['baseline'])}); ratio to (b) "
              f"{med['baseline'] / med['bare']:.3f}; CPU seconds: "
              + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in sorted(base_cpus.items())))
    print("where (a)'s extra time goes:")
    if cpus:
        print("  CPU seconds (median): (a) " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in
                                                       sorted(cpus.items())) + "; (b) "
              + ", ".join(f"{statistics.median(r[i]['cpu'] for r in bare_reports):.1f}"
                          for i in range(len(bare_reports[0]))))
    print(f"  start-up: (a) command minus server loop {med['torchrun'] - loop:.1f} s (launcher, imports, rendezvous, "
          f"data, teardown); (b) time to first SGD step {first:.1f} s")
    print(f"  rank 0's evaluation: {events['eval']} x {ev_s:.2f} s (1 thread, measured here) = "
          f"{events['eval'] * ev_s:.1f} s of CPU, on the same 2 cores as the workers")
    print(f"  round barrier: jobs per worker {per_worker} (runtime.placement={placement}); the busier "
          f"worker's jobs summed over rounds = {critical} vs {half:.0f} per bare process: "
          f"{critical / half:.2f}x the training on the critical path, ~{(critical - half) * per_job:.1f} s at "
          f"(b)'s {per_job:.2f} s per job")


if __name__ == "__main__":
    main()
