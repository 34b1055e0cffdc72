"""The default GPU transport (headers and payloads over gloo, CUDA results staged through pinned
host memory on a side stream) on one GPU: it cannot stall the stream training uses, moves CUDA
payloads exactly, and a torchrun W = 3 run (rank 0 and two workers sharing the GPU) gives the
in-process run's bytes with runtime.deterministic.
Skipped without CUDA; run with ``python -m pytest -q tests/gpu -s``.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from seafl_dist.transport import BYE, JOB, RESULT, STOP, Header, Mailbox, Outbox

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
NUMEL = 1_000_000
IDLE_S = 6.0


def _poll(mailbox, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = mailbox.poll(timeout=0.05)
        if got:
            return got
    raise AssertionError(f"nothing arrived within {timeout}s")


def _idle_peer(rank, init_file, report):
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    mailbox, outbox = Mailbox([1 - rank], NUMEL), Outbox()
    if rank == 0:  # idle for IDLE_S, then send a job; expect the CUDA result back
        time.sleep(IDLE_S)
        outbox.send(1, Header(JOB, job=1, has_payload=True, payload_numel=NUMEL), torch.ones(NUMEL))
        [(_, h, payload)] = _poll(mailbox)
        expected = torch.arange(NUMEL, dtype=torch.float32).cuda().mul_(3).add_(1).cpu()
        report.put(("result", h.kind, payload.device.type, bool(torch.equal(payload, expected))))
        outbox.send(1, Header(STOP))
        [(_, h, _)] = _poll(mailbox)
        assert h.kind == BYE
    else:  # a receive from rank 0 is posted; GPU work on the default stream must not wait for it
        x = torch.randn(2048, 2048, device="cuda")
        t0 = time.monotonic()
        for _ in range(20):
            x = torch.tanh(x @ x)
        torch.cuda.synchronize()
        report.put(("gpu_work_s", time.monotonic() - t0))
        [(_, h, payload)] = _poll(mailbox)
        result = torch.arange(NUMEL, dtype=torch.float32, device="cuda").mul_(3).add_(payload.cuda())
        outbox.send(0, Header(RESULT, job=h.job, has_payload=True, payload_numel=NUMEL), result)
        del result  # the outbox keeps the CUDA tensor alive until its copy to the host is done
        [(_, h, _)] = _poll(mailbox)
        assert h.kind == STOP
        outbox.send(0, Header(BYE))
    # the runtime's shutdown: STOP, then BYE, end each peer's receiver thread before the group goes
    # (a receive still posted when the process group is destroyed aborts the process)
    assert mailbox.wait_closed(30.0)
    outbox.flush()
    outbox.close()
    dist.barrier()
    dist.destroy_process_group()


def test_an_idle_peer_does_not_stall_the_gpu_and_cuda_payloads_arrive_exactly(tmp_path):
    report = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_idle_peer, args=(str(tmp_path / "init"), report), nprocs=2, join=True)
    got = {}
    while not report.empty():
        item = report.get()
        got[item[0]] = item[1:]
    assert got["gpu_work_s"][0] < IDLE_S / 2, f"GPU work waited for the idle peer: {got['gpu_work_s'][0]:.1f}s"
    assert got["result"] == (RESULT, "cpu", True)  # received on the CPU, bit for bit


def _start(args, cwd, launcher):
    """A run of the quickstart, started (runs of one test go at once: the GPU has room for all)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen([*launcher, "run", QUICKSTART, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait(proc) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return err


def test_three_ranks_sharing_one_gpu_give_the_inprocess_bytes(tmp_path):
    """runtime.deterministic: events.jsonl, metrics.csv and model.pt byte-identical to the one
    process's (SEAFL² with notifications, so partial training crosses the ranks too)."""
    import trained
    small = ["devices.num=10", "devices.concurrency=4", "algorithm.name=seafl2", "algorithm.buffer_size=2",
             "algorithm.staleness_limit=1", "train.epochs=2", "train.lr=0.02", "run.max_aggregations=8",
             "runtime.threads=1", "runtime.device=cuda", "logging.progress=none", "runtime.deterministic=true"]
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3", "-m", "seafl_dist")
    t0 = time.monotonic()
    one = _start([*small, "--out", str(tmp_path / "one")], tmp_path, (sys.executable, "-m", "seafl_dist"))
    three = _start([*small, "--out", str(tmp_path / "three")], tmp_path, torchrun)
    _wait(one)
    assert "on 3 ranks (gloo)" in _wait(three)  # the default GPU transport
    print(f"\nW=3 and one process on one GPU at once: {time.monotonic() - t0:.1f}s")
    assert any(ev["event"] == "notify" for ev in trained.events(tmp_path / "one")), \
        "no notification: partial training is not exercised"
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "three" / name).read_bytes(), name
