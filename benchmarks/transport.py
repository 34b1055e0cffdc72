"""Round trip of ResNet-18's flat parameters between two gloo ranks, next to an in-memory copy.

    python benchmarks/transport.py [--iters 10] [--threads 1]

Builds ResNet-18 (10 classes, 3 channels, width 1), flattens it (parameters and BN buffers,
~11.2M float32 values, ~45 MB), spawns two ranks on this machine (gloo over loopback TCP) and
times, side by side in one run:

- ``clone``: ``flat.clone()`` in rank 0's process (the in-process runner's cost of handing
  a model over);
- ``raw``: rank 0 ``dist.send``s the vector, rank 1 ``dist.recv``s it and sends it back;
- ``seafl``: the same round trip through the project's transport: rank 0 ``Outbox.send``s a
  JOB header + payload, rank 1's ``Mailbox`` receives and checks it and answers with a RESULT,
  which rank 0's ``Mailbox`` receives (the path every job and result takes in the runtime).

A round trip moves the vector twice, so its rate is 2 x size / time; a clone moves it once.

Then compressed uploads (``compression.codec``, issue 41; ``--codecs none,int8,topk``, top-k at
``--fraction`` 0.01): for each codec, the bytes of one update, the worker's encode time (a trained
model and its base to the upload), the transport's time for a RESULT carrying it from rank 1 to
rank 0 (rank 1 times ``Outbox.send`` until rank 0's payload-less answer arrives, so each time
holds one small header back), and rank 0's decode time, with ratios to ``none``.
Each rank uses ``--threads`` intra-op threads (torchrun's default, and runtime.threads=1, is 1).
Medians over ``--iters`` timed repetitions after two warm-ups. A script, not a test.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def median_time(fn, iters: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def farewell(mailbox, outbox, peer: int) -> None:
    """BYE both ways before the group goes: a receiver thread still waiting in irecv when it is destroyed aborts."""
    from seafl_dist.transport import BYE, Header
    outbox.send(peer, Header(BYE))
    outbox.flush()
    mailbox.wait_closed(60.0)
    outbox.close()
    dist.barrier()
    dist.destroy_process_group()


def _rank(rank: int, init_file: str, flat: torch.Tensor, iters: int, threads: int, result_file: str) -> None:
    from seafl_dist.transport import JOB, RESULT, Header, Mailbox, Outbox

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    numel, reps = flat.numel(), iters + 2
    flat = flat.clone()  # a private copy (the argument lives in shared memory)

    # raw send/recv, blocking, one direction at a time
    if rank == 0:
        def raw():
            dist.send(flat, dst=1)
            back = torch.empty_like(flat)
            dist.recv(back, src=1)
        t_raw = median_time(raw, iters)
    else:
        buf = torch.empty_like(flat)
        for _ in range(reps):
            dist.recv(buf, src=0)
            dist.send(buf, dst=0)
    dist.barrier()

    # the project's transport: header + payload through Outbox / Mailbox threads
    peer = 1 - rank
    mailbox, outbox = Mailbox([peer], numel), Outbox()
    if rank == 0:
        job = Header(JOB, job=0, device=0, version=0, epochs=1, has_payload=True, finish=1.0, payload_numel=numel)

        def seafl():
            outbox.send(1, job, flat)
            got = []
            while not got:
                got = mailbox.poll(timeout=1.0)
            assert got[0][1].kind == RESULT and got[0][2].numel() == numel
        t_seafl = median_time(seafl, iters)
        t_clone = median_time(flat.clone, iters)
        with open(result_file, "w") as f:
            f.write(f"{t_clone} {t_raw} {t_seafl}\n")
    else:
        done = 0
        while done < reps:
            for _, h, payload in mailbox.poll(timeout=1.0):
                outbox.send(0, Header(RESULT, job=h.job, has_payload=True, finish=h.finish, payload_numel=numel),
                            payload)
                done += 1
    farewell(mailbox, outbox, peer)


def _upload(rank: int, init_file: str, upload: torch.Tensor, wire: tuple, numel: int, iters: int, threads: int,
            result_file: str) -> None:
    """One codec's RESULT from rank 1 to rank 0, answered by a payload-less JOB header; rank 1 times it."""
    from seafl_dist.transport import JOB, RESULT, Header, Mailbox, Outbox

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    upload = upload.clone()
    mailbox, outbox = Mailbox([1 - rank], numel, upload=wire if rank == 0 else (0, 0)), Outbox()
    if rank == 1:
        result = Header(RESULT, job=0, has_payload=True, finish=1.0, payload_numel=upload.numel(), codec=wire[0])

        def send():
            outbox.send(0, result, upload)
            got = []
            while not got:
                got = mailbox.poll(timeout=1.0)
        with open(result_file, "w") as f:
            f.write(f"{median_time(send, iters)}\n")
    else:
        for _ in range(iters + 2):
            got = []
            while not got:
                got = mailbox.poll(timeout=1.0)
            assert got[0][1].kind == RESULT and got[0][2].numel() == upload.numel()
            outbox.send(1, Header(JOB, job=0))
    farewell(mailbox, outbox, 1 - rank)


def compressed_uploads(model, flat: torch.Tensor, codecs: list[str], fraction: float, iters: int,
                       threads: int) -> None:
    """The bytes of one update, and its encode, transport and decode times, for each codec (module docstring)."""
    from seafl_dist.codecs import UpdateCodec
    from seafl_dist.settings import CompressionConfig
    from seafl_dist.train import FlatLayout

    torch.set_num_threads(threads)
    layout = FlatLayout.of(model)
    trained = flat + 1e-3 * torch.randn(flat.numel(), generator=torch.Generator().manual_seed(1))
    rows = []
    for name in codecs:
        codec = UpdateCodec(CompressionConfig(codec=name, fraction=fraction), layout)
        upload = codec.encode(trained, flat, 0)
        t_encode = median_time(lambda: codec.encode(trained, flat, 0), iters)
        t_decode = median_time(lambda: codec.decode(upload, flat), iters)
        with tempfile.TemporaryDirectory() as tmp:
            result = os.path.join(tmp, "result")
            mp.spawn(_upload, args=(os.path.join(tmp, "init"), upload.share_memory_(), codec.wire, flat.numel(),
                                    iters, threads, result), nprocs=2, join=True)
            t_send = float(open(result).read())
        label = f"topk {fraction:g}" if name == "topk" else name
        rows.append((label, codec.upload_bytes, t_encode, t_send, t_decode))
    print(f"\none update of ResNet-18, worker -> rank 0 ({threads} thread(s) per rank, median of {iters})")
    print(f"{'codec':<10} {'bytes':>12} {'vs none':>8} {'encode':>9} {'transport':>10} {'vs none':>8} {'decode':>9}")
    base_bytes, base_send = rows[0][1], rows[0][3]
    for label, nbytes, t_enc, t_send, t_dec in rows:
        print(f"{label:<10} {nbytes:>12,} {nbytes / base_bytes:>8.4f} {t_enc * 1e3:>7.1f}ms {t_send * 1e3:>8.1f}ms "
              f"{t_send / base_send:>8.3f} {t_dec * 1e3:>7.1f}ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (default 1)")
    ap.add_argument("--codecs", default="none,int8,topk", help="compressed uploads to time, `none` first (default "
                    "none,int8,topk); empty: none")
    ap.add_argument("--fraction", type=float, default=0.01, help="top-k's fraction (default 0.01)")
    args = ap.parse_args()

    from seafl_dist.models import build_model
    from seafl_dist.train import flatten
    torch.manual_seed(0)
    model = build_model("resnet18", 10, 3, image_size=32)
    flat = flatten(model)
    size = flat.numel() * flat.element_size()
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result")
        mp.spawn(_rank, args=(os.path.join(tmp, "init"), flat.share_memory_(), args.iters, args.threads, result),
                 nprocs=2, join=True)
        t_clone, t_raw, t_seafl = map(float, open(result).read().split())

    load = os.getloadavg()
    print(f"ResNet-18 flat vector: {flat.numel():,} float32 = {size / 1e6:.1f} MB; {args.threads} thread(s) per rank, "
          f"median of {args.iters}; load average {load[0]:.2f} (1 min) on {os.cpu_count()} CPUs")
    print(f"{'path':<44} {'time':>10} {'GB/s':>8} {'vs clone':>9}")
    rows = [("in-memory copy (flat.clone())", t_clone, size),
            ("round trip, raw dist.send/recv (gloo)", t_raw, 2 * size),
            ("round trip, Outbox/Mailbox JOB->RESULT", t_seafl, 2 * size)]
    for name, t, moved in rows:
        print(f"{name:<44} {t * 1e3:>8.1f}ms {moved / t / 1e9:>8.2f} {t / t_clone:>8.1f}x")
    print(f"transport overhead of Outbox/Mailbox over raw send/recv: {t_seafl / t_raw:.2f}x")
    if args.codecs:
        compressed_uploads(model, flat, args.codecs.split(","), args.fraction, args.iters, args.threads)


if __name__ == "__main__":
    main()
