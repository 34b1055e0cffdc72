"""W1 against Flower: seafl_dist's run of W1 and Flower 1.42's simulation of it, timed in one run, at
SGD momentum 0 and 0.9 side by side.

    python benchmarks/w1_flower.py --flwr-python /path/to/flwr-venv/bin/python [--pairs 3] [--momentum 0 0.9]

W1 (issue 10, issue 23 point 4): 100 devices x 600 MNIST-format images, LeNet-5, FedAvg with 20
devices a round, 10 rounds, E = 5, B = 32, SGD lr 0.01 with ``--momentum`` (both sides), the global
model evaluated on the 10,000 test images before training and after every round; 200 local jobs
of 95 SGD steps. The two sides, each the whole command from its start to its exit:

(seafl)  ``OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=3 -m seafl_dist run
         configs/mnist_prelim.yaml`` with W1's overrides (benchmarks/w1_overhead.py's ``W1``) and
         ``train.momentum``: rank 0 schedules, aggregates and evaluates, two workers train, 1 torch
         thread a rank;
(Flower) benchmarks/w1_flower_app.py under ``--flwr-python``: ``flwr.simulation.run_simulation``
         on Ray with 100 supernodes, ``FedAvg(fraction_train=0.2)``, a centralised ``evaluate_fn``,
         one CPU a client on a Ray cluster of all this machine's CPUs (two clients at once on two
         cores), 1 torch thread a client; the clients' local training in ``--flower-form``
         (benchmarks/w1_client_forms.py; the default is the fastest form measured there).

Every pair runs both sides at one momentum, the sides' order alternating from pair to pair and
the momenta's order too (a shared VM drifts). Printed per momentum: every pair's times and ratio,
the median ratio Flower / seafl (the issue's goal: >= 1.5 at both momenta), the seconds inside
each side's loop (seafl's ``wall_time_s``, Flower's "Strategy execution finished in") against
start-up and teardown, the CPU seconds of each side's process tree and those its trainers spent
(seafl's two workers; Flower's clients, inside their training function); the load average
before and after. ``--rounds`` fewer than 10 is a quick functional check, not W1.

Flower is not a project dependency: install it in a separate venv (docs/performance.md, "W1
against Flower"). Real MNIST is read from ``--data-root``/MNIST/raw; when absent, synthetic images
in the same IDX format (60,000 + 10,000, random pixels and labels) are written to a temporary
directory and used by both sides: the work per step is the same, the accuracies are chance.
A script, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from w1_bare import mnist_or_synthetic  # beside this script
from w1_client_forms import FASTEST, FORMS
from w1_overhead import ROOT, run_torchrun

APP = Path(__file__).with_name("w1_flower_app.py")
TRAINERS = {"seafl": "its workers (whole processes)", "flower": "its clients' training calls"}
LOOP = re.compile(r"Strategy execution finished in ([0-9.]+)s")


def flower_versions(python: str) -> str:
    """flwr, ray and torch as the Flower interpreter imports them; exits with one line if it cannot."""
    code = ("import importlib.metadata as m, torch; "
            "print(f\"flwr {m.version('flwr')}, ray {m.version('ray')}, torch {torch.__version__}\")")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"--flwr-python {python} cannot import flwr, ray and torch ({proc.stderr.strip().splitlines()[-1:]}); "
                 "install them there: docs/performance.md, 'W1 against Flower'")
    return proc.stdout.strip()


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds so far of ``root`` and every process below it (Ray's raylet, GCS and workers), from
    /proc; empty where there is none. Sampled, so each process's last fraction of a second is missed."""
    tick, parent, cpu = os.sysconf("SC_CLK_TCK"), {}, {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            parent[int(d.name)] = int(fields[1])
            cpu[int(d.name)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    mine, grew = {root}, True
    while grew:
        new = {p for p, pp in parent.items() if pp in mine and p not in mine}
        mine |= new
        grew = bool(new)
    return {p: cpu[p] for p in mine if p in cpu}


def run_flower(python: str, data_root: Path, rounds: int, momentum: float, form: str
               ) -> tuple[float, float | None, dict, float]:
    """The whole Flower command's wall time, its strategy loop's seconds, its JSON report and the CPU
    seconds of its process tree."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([python, str(APP), "--data-root", str(data_root), "--rounds", str(rounds),
                                 "--cpus", str(os.cpu_count()), "--momentum", str(momentum), "--form", form],
                                env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        cpu: dict[int, float] = {}
        while proc.poll() is None:
            cpu.update(tree_cpu(proc.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        sys.exit(f"the Flower simulation failed ({proc.returncode}):\n{text[-3000:]}")
    loop = LOOP.search(text)
    report = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
    return wall, float(loop.group(1)) if loop else None, report, sum(cpu.values())


def run_pair(args, data_root: Path, tmp: Path, i: int, momentum: float, out: dict) -> None:
    """Pair ``i`` at ``momentum``: both sides, seafl first in even pairs; appended to ``out[momentum]``."""
    for side in (("seafl", "flower") if i % 2 == 0 else ("flower", "seafl")):
        print(f"pair {i + 1}/{args.pairs}, momentum {momentum:g}: {side} ...", file=sys.stderr, flush=True)
        if side == "seafl":
            wall, summ = run_torchrun(data_root, tmp / f"seafl-{i}-{momentum}", args.world,
                                      [f"train.momentum={momentum}", f"run.max_aggregations={args.rounds}"])
            loop, updates, cpu = summ["wall_time_s"], summ["events"]["finish"], sum(summ["cpu"].values())
            trainers = sum(v for k, v in summ["cpu"].items() if k.startswith("rank ") and k != "rank 0")
            evals, acc = summ["events"]["eval"], summ["final_accuracy"]
        else:
            wall, loop, flower, cpu = run_flower(args.flwr_python, data_root, args.rounds, momentum, args.flower_form)
            updates, evals, acc = flower["updates"], flower["evaluations"], flower["final_accuracy"]
            trainers = flower["client_train_cpu_s"]
        for key, value in (("time", wall), ("loop", loop), ("cpu", cpu), ("trainers", trainers)):
            out[momentum][side][key].append(value)
        print(f"  {wall:.1f} s command, {loop or float('nan'):.1f} s loop, {cpu:.1f} CPU s ({trainers:.1f} in "
              f"{TRAINERS[side]}); {updates} updates, {evals} evaluations, final accuracy {acc:.4f}", file=sys.stderr,
              flush=True)


def print_report(out: dict, momenta: list[float]) -> None:
    """Per momentum: the pairs, the medians and where each side's time went; then both ratios."""
    summary = []
    for m in momenta:
        times = {side: out[m][side]["time"] for side in ("seafl", "flower")}
        ratios = [f / s for s, f in zip(times["seafl"], times["flower"])]
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"momentum {m:g}:")
        for i, (s, f) in enumerate(zip(times["seafl"], times["flower"])):
            print(f"  pair {i + 1}: seafl {s:6.1f} s, Flower {f:6.1f} s, Flower/seafl {f / s:.2f}x")
        print(f"  median: seafl {med['seafl']:.1f} s, Flower {med['flower']:.1f} s; median ratio Flower/seafl "
              f"{statistics.median(ratios):.2f}x; range {min(ratios):.2f}-{max(ratios):.2f}x")
        for side in ("seafl", "flower"):
            inner = [x for x in out[m][side]["loop"] if x is not None]
            loop = statistics.median(inner) if inner else None
            where = f"loop {loop:.1f} s, start-up and teardown {med[side] - loop:.1f} s, " if inner else ""
            print(f"  {side}: {where}CPU seconds of the whole process tree {statistics.median(out[m][side]['cpu']):.1f}, "
                  f"of {TRAINERS[side]} {statistics.median(out[m][side]['trainers']):.1f} (medians)")
        summary.append(f"momentum {m:g} {statistics.median(ratios):.2f}x")
    print("median ratio Flower/seafl: " + ", ".join(summary) + " (goal >= 1.5x at both)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flwr-python", default=os.environ.get("W1_FLWR_PYTHON"),
                    help="the Python of a venv with flwr[simulation]==1.42.* and torch (or $W1_FLWR_PYTHON)")
    ap.add_argument("--pairs", type=int, default=3, help="seafl/Flower pairs at each momentum, the order alternating")
    ap.add_argument("--momentum", nargs="+", type=float, default=[0.0, 0.9], choices=[0.0, 0.9],
                    help="SGD momentum of both sides; each one given is measured (default: both, side by side)")
    ap.add_argument("--flower-form", default=FASTEST, choices=FORMS,
                    help=f"the Flower clients' local training (benchmarks/w1_client_forms.py; default {FASTEST})")
    ap.add_argument("--rounds", type=int, default=10, help="FedAvg rounds (W1: 10; fewer only to check the script)")
    ap.add_argument("--data-root", default=str(ROOT / "data"), help="holds MNIST/raw/ (IDX files, gzipped or not)")
    ap.add_argument("--world", type=int, default=3, help="seafl's torchrun ranks: one server and world-1 workers")
    args = ap.parse_args()
    if not args.flwr_python:
        sys.exit("--flwr-python is required (or $W1_FLWR_PYTHON): a venv's python with flwr[simulation]==1.42.* and "
                 "torch; docs/performance.md, 'W1 against Flower', says how to make one")
    if args.pairs < 1 or args.rounds < 1:
        sys.exit(f"--pairs {args.pairs} and --rounds {args.rounds} must be at least 1")
    versions = flower_versions(args.flwr_python)
    momenta = list(dict.fromkeys(args.momentum))

    out = {m: {side: {k: [] for k in ("time", "loop", "cpu", "trainers")} for side in ("seafl", "flower")}
           for m in momenta}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_root, source = mnist_or_synthetic(args.data_root, tmp)
        load_before = os.getloadavg()
        for i in range(args.pairs):
            for m in (momenta if i % 2 == 0 else momenta[::-1]):
                run_pair(args, data_root, tmp, i, m, out)
    load_after = os.getloadavg()

    print(f"W1: 100 devices x 600 images, LeNet-5, FedAvg 20 a round, {args.rounds} rounds, E=5, B=32; {source}; "
          f"{os.cpu_count()} CPUs; load average (1/5/15 min) {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after; {args.pairs} pair(s) a momentum, order alternating")
    print(f"Flower side: {versions}, clients in form {args.flower_form!r}; seafl side: torchrun W={args.world}, "
          f"1 thread a rank")
    print_report(out, momenta)


if __name__ == "__main__":
    main()
