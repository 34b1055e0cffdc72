"""What a stopped worker does to a residual checkpoint written with torch.distributed.checkpoint (DCP) against the
per-worker torch.save files runtime/residuals.py writes (issue 52's "measured reason").

    python benchmarks/dcp_stall.py [--workers 3] [--timeout 20] [--devices 50] [--params 61706]

``--workers`` processes form a gloo process group (as the workers of a run would have to for DCP: dcp.save plans
and commits with collectives over it) whose timeout is ``--timeout`` s (a run's is 86,400 s: its liveness comes from
heartbeats, not from collectives). Each holds the residuals of ``--devices`` devices (float32, ``--params`` each:
LeNet-5's by default). Two rounds:

1. every worker saves: the time of dcp.save and of runtime/residuals.py's torch.save file, each worker's median;
2. the last worker is stopped (SIGSTOP, as tests/dist/test_failures.py freezes one) before it saves; the others
   save again, and the time until each returns or raises is printed with what it raised.

A script, not a test; docs/failures.md quotes its output.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, n: int, port: int, timeout: float, devices: int, params: int, folder: str, results) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from seafl_dist.runtime import checkpoint

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=timeout))
    gen = torch.Generator().manual_seed(rank)
    held = {f"device{rank * devices + k}": torch.randn(params, generator=gen) for k in range(devices)}
    root = Path(folder)
    for rnd, stop in ((1, False), (2, True)):
        dist.barrier()
        if stop and rank == n - 1:
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen, as a stopped process is; its peers go on
        t0 = time.perf_counter()
        checkpoint.atomic_save(held, root / f"plain-r{rnd}-w{rank}.pt")
        plain = time.perf_counter() - t0
        results.put((rnd, rank, plain, None, "entered"))
        t0 = time.perf_counter()
        try:
            dcp.save(held, checkpoint_id=str(root / f"dcp-r{rnd}"))
            what = "returned"
        except Exception as e:  # noqa: BLE001 -- what the collective raised is the measurement
            what = f"raised {type(e).__name__}: {str(e).splitlines()[0][:90]}"
        results.put((rnd, rank, plain, time.perf_counter() - t0, what))
        if stop:
            break
    os._exit(0)  # a peer is frozen: gloo's threads must not abort the exit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--params", type=int, default=61_706)
    ap.add_argument("--wait", type=float, default=60.0, help="seconds to wait past 3 x the timeout before giving up")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="dcp-stall-") as folder:
        port = free_port()
        procs = [ctx.Process(target=worker, args=(r, args.workers, port, args.timeout, args.devices, args.params,
                                                  folder, results)) for r in range(args.workers)]
        for p in procs:
            p.start()
        want = 2 * (2 * args.workers - 1)  # each saver's torch.save, then its dcp.save
        got = []
        t0 = time.monotonic()
        deadline = t0 + 3 * args.timeout + args.wait
        while len(got) < want and time.monotonic() < deadline:
            try:
                got.append(results.get(timeout=5))
                rnd, rank, _, d, _ = got[-1]
                print(f"  {time.monotonic() - t0:6.1f} s: round {rnd}, worker {rank}: "
                      f"{'torch.save done' if d is None else 'dcp.save done'}", flush=True)
            except Exception:  # noqa: BLE001 -- queue.Empty: keep waiting until the deadline
                pass
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    mb = args.devices * args.params * 4 / 1e6
    print(f"{args.workers} workers, {args.devices} devices x {args.params:,} float32 each ({mb:.1f} MB a worker), "
          f"process-group timeout {args.timeout:g} s; torch {torch.__version__}, {sys.platform}")
    print("| round | worker | torch.save file (s) | dcp.save (s) | dcp.save |")
    print("|---|---|---|---|---|")
    waited = 3 * args.timeout + args.wait
    ended = {(rnd, rank): (d, what) for rnd, rank, _, d, what in got if d is not None}
    for rnd, rank, plain, _, _ in sorted(g for g in got if g[3] is None):
        d, what = ended.get((rnd, rank), (None, f"still inside it after {waited:g} s (killed)"))
        print(f"| {'all save' if rnd == 1 else f'worker {args.workers - 1} stopped'} | {rank} | {plain:.3f} | "
              f"{'—' if d is None else f'{d:.2f}'} | {what} |")


if __name__ == "__main__":
    main()
