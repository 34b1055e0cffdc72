"""The same digits run in one process and on W torchrun ranks: wall times and speedup.

    python benchmarks/scaling.py [--world 3] [--skip-multithread] [CONFIG [key.sub=value ...]]

Runs, one after the other, in one invocation (default CONFIG: configs/quickstart.yaml, whose
120 aggregations of SEAFL on 30 digits devices, 650 jobs, take 20-60 s in one process on a
2-core machine, depending on what else it runs):

1. ``seafl run`` in one process, ``runtime.threads=1``;
2. ``seafl run`` in one process, ``runtime.threads=<CPUs>`` (torch's default on this machine);
3. ``torchrun --nproc_per_node=W -m seafl_dist run`` with ``runtime.threads=1`` per rank
   (rank 0 aggregates and evaluates, W-1 workers train).

For each it prints the wall time of the whole command (interpreter start-up, imports, data,
torchrun's rendezvous included) and the run's own ``wall_time_s`` from summary.json (the
server loop alone), then the speedup of (3) over the faster in-process run, which is the
baseline. It checks that (1) and (3) wrote byte-identical events.jsonl (same thread count,
same bits) and that (2) has the same schedule (its accuracies may differ in the last bits).
The 1-minute load average is printed before and after: other work on the machine skews the
figures. A script, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], out: Path) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall, json.loads((out / "summary.json").read_text())


def schedule(run: Path) -> list[tuple]:
    """Who trained when and what each aggregation took, without any number computed from a model
    (accuracies and SEAFL weights depend on the thread count's rounding)."""
    out = []
    for line in (run / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "aggregate":
            out.append(("aggregate", ev["time"], ev["version"], [(u["device"], u["job"], u["staleness"])
                                                                  for u in ev["updates"]]))
        elif ev["event"] != "eval":
            out.append(tuple(sorted((k, str(v)) for k, v in ev.items())))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=3, help="torchrun ranks (default 3: one server, two workers)")
    ap.add_argument("--skip-multithread", action="store_true",
                    help="skip run (2); on a machine other jobs keep busy, intra-op threads can make it very slow")
    ap.add_argument("config", nargs="?", default=str(ROOT / "configs" / "quickstart.yaml"))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    cpus = os.cpu_count() or 1
    common = [args.config, *args.overrides, "logging.progress=none", "runtime.device=cpu"]
    seafl = [sys.executable, "-m", "seafl_dist", "run"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.world}",
                "-m", "seafl_dist", "run"]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        single, multi = "in-process, 1 thread", f"in-process, {cpus} threads"
        dist_name = f"torchrun W={args.world}, 1 thread/rank"
        runs = {single: (seafl + common + ["runtime.threads=1"], tmp / "w1t1"),
                multi: (seafl + common + [f"runtime.threads={cpus}"], tmp / f"w1t{cpus}"),
                dist_name: (torchrun + common + ["runtime.threads=1"], tmp / "dist")}
        if args.skip_multithread:
            del runs[multi]
        results = {}
        for name, (cmd, out) in runs.items():
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results[name] = timed(cmd, out)
        same_trace = (tmp / "w1t1" / "events.jsonl").read_bytes() == (tmp / "dist" / "events.jsonl").read_bytes()
        same_schedule = None if args.skip_multithread else schedule(tmp / "w1t1") == schedule(tmp / f"w1t{cpus}")
    load_after = os.getloadavg()[0]

    s = results[single][1]
    print(f"{Path(args.config).name} {' '.join(args.overrides)}: {s['algorithm']}, {s['aggregations']} aggregations, "
          f"{s['events']['start']} jobs; {cpus} CPUs; load average (1 min) {load_before:.2f} before, "
          f"{load_after:.2f} after")
    print(f"{'run':<32} {'command wall':>13} {'server loop':>12} {'final acc':>10}")
    for name, (wall, summ) in results.items():
        print(f"{name:<32} {wall:>12.1f}s {summ['wall_time_s']:>11.1f}s {summ['final_accuracy']:>10.4f}")
    base = min((n for n in results if n != dist_name), key=lambda n: results[n][0])
    print(f"baseline: {base} (the faster in-process run, by command wall time)")
    print(f"speedup of {dist_name}: {results[base][0] / results[dist_name][0]:.2f}x (command wall), "
          f"{results[base][1]['wall_time_s'] / results[dist_name][1]['wall_time_s']:.2f}x (server loop); "
          f"vs in-process 1 thread: {results[single][0] / results[dist_name][0]:.2f}x (command wall)")
    print(f"events.jsonl identical, torchrun vs in-process 1 thread: {same_trace}"
          + ("" if same_schedule is None else f"; schedule identical, in-process 1 vs {cpus} threads: {same_schedule}"))


if __name__ == "__main__":
    main()
