"""The same digits run in one process and on W torchrun ranks: wall times and speedup.

    python benchmarks/scaling.py [--world 3] [--repeat N] [--skip-multithread] [CONFIG [key.sub=value ...]]

Default run: the paper's main setup scaled to digits (configs/digits/digits_main.yaml: SEAFL,
40 devices, 20 in flight, K = 10, LeNet-5, E = 5) for a fixed 2,700 virtual seconds, with the
early stop at the target accuracy switched off so every run does the same work: about 2,400
jobs, 1-2 minutes in one process on a 2-core machine. It is long enough that start-up
(interpreter, ``import lightning`` in every rank, torchrun's rendezvous: ~4 s for one process,
~9 s for three ranks on 2 cores) does not decide the result, as it would not in real use. Pass
another CONFIG (and overrides) to measure something else, e.g. ``configs/quickstart.yaml``.

Runs, in one invocation, ``--repeat`` rounds of (interleaved, so a slow spell of a shared
machine hits every kind alike):

1. ``seafl run`` in one process, ``runtime.threads=1``;
2. ``seafl run`` in one process, ``runtime.threads=<CPUs>`` (torch's default on this machine);
3. ``torchrun --nproc_per_node=W -m seafl_dist run`` with ``runtime.threads=1`` per rank
   (rank 0 aggregates and evaluates, W-1 workers train).

For each it prints the median wall time of the whole command and of the run's own
``wall_time_s`` from summary.json (the server loop alone), then the speedups of (3) over (1),
which is the same run bit for bit, and over (2). It checks that (1) and (3) wrote
byte-identical events.jsonl and that (2) has the same schedule (its accuracies may differ in
the last bits). The 1-minute load average is printed before and after: other work on the
machine skews the figures. A script, not a test.
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

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [str(ROOT / "configs" / "digits" / "digits_main.yaml"), "run.target_accuracy=null", "run.max_time=2700"]


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
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the runs, interleaved; medians are printed")
    ap.add_argument("--skip-multithread", action="store_true",
                    help="skip run (2); on a machine other jobs keep busy, intra-op threads can make it very slow")
    ap.add_argument("config", nargs="?", default=None, help="default: " + " ".join(Path(DEFAULT[0]).parts[-3:]
                                                                                   + tuple(DEFAULT[1:])))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    run_args = [args.config, *args.overrides] if args.config else DEFAULT
    cpus = os.cpu_count() or 1
    common = [*run_args, "logging.progress=none", "runtime.device=cpu"]
    seafl = [sys.executable, "-m", "seafl_dist", "run"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.world}",
                "-m", "seafl_dist", "run"]
    single, multi = "in-process, 1 thread", f"in-process, {cpus} threads"
    dist_name = f"torchrun W={args.world}, 1 thread/rank"
    runs = {single: (seafl + common + ["runtime.threads=1"], "w1t1"),
            multi: (seafl + common + [f"runtime.threads={cpus}"], f"w1t{cpus}"),
            dist_name: (torchrun + common + ["runtime.threads=1"], "dist")}
    if args.skip_multithread:
        del runs[multi]
    load_before = os.getloadavg()[0]
    walls: dict[str, list[float]] = {n: [] for n in runs}
    loops: dict[str, list[float]] = {n: [] for n in runs}
    summaries: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for rnd in range(args.repeat):
            for name, (cmd, sub) in runs.items():
                print(f"round {rnd + 1}/{args.repeat}: {name} ...", file=sys.stderr, flush=True)
                wall, summ = timed(cmd, tmp / f"{sub}-{rnd}")
                walls[name].append(wall)
                loops[name].append(summ["wall_time_s"])
                summaries[name] = summ
                print(f"  {wall:.1f}s command, {summ['wall_time_s']:.1f}s server loop", file=sys.stderr, flush=True)
        same_trace = all((tmp / f"w1t1-{r}" / "events.jsonl").read_bytes()
                         == (tmp / f"dist-{r}" / "events.jsonl").read_bytes() for r in range(args.repeat))
        same_schedule = None if args.skip_multithread else schedule(tmp / "w1t1-0") == schedule(tmp / f"w1t{cpus}-0")
    load_after = os.getloadavg()[0]

    wall = {n: statistics.median(v) for n, v in walls.items()}
    loop = {n: statistics.median(v) for n, v in loops.items()}
    s = summaries[single]
    print(f"{' '.join(Path(run_args[0]).parts[-2:])} {' '.join(run_args[1:])}: {s['algorithm']}, "
          f"{s['aggregations']} aggregations, {s['events']['start']} jobs; {cpus} CPUs; "
          f"load average (1 min) {load_before:.2f} before, {load_after:.2f} after")
    print(f"{'run (median of ' + str(args.repeat) + ')':<32} {'command wall':>13} {'server loop':>12} {'final acc':>10}")
    for name in runs:
        print(f"{name:<32} {wall[name]:>12.1f}s {loop[name]:>11.1f}s {summaries[name]['final_accuracy']:>10.4f}")
    for base in [n for n in runs if n != dist_name]:
        print(f"speedup of {dist_name} over {base}: {wall[base] / wall[dist_name]:.2f}x (command wall), "
              f"{loop[base] / loop[dist_name]:.2f}x (server loop)")
    print(f"events.jsonl identical, torchrun vs in-process 1 thread: {same_trace}"
          + ("" if same_schedule is None else f"; schedule identical, in-process 1 vs {cpus} threads: {same_schedule}"))


if __name__ == "__main__":
    main()
