"""Outbox/Mailbox over real gloo ranks: a JOB with its model out, a RESULT back (poll(None) waits for it),
a wrong size refused.

torch.distributed needs processes, not threads, so the test spawns two. This module imports
only torch and seafl_dist.transport, so the spawned children start quickly.
"""
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from seafl_dist.transport import BYE, JOB, RESULT, Header, Mailbox, MessageError, Outbox
from seafl_dist.transport.p2p import TransportError


NUMEL = 1000


def poll_until(mailbox, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = mailbox.poll(timeout=0.05)
        if got:
            return got
    raise AssertionError(f"no {what} within {timeout}s")


def _exchange(rank, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    peer = 1 - rank
    model = torch.arange(NUMEL, dtype=torch.float32) / 7
    mailbox, outbox = Mailbox([peer], NUMEL), Outbox()
    if rank == 0:
        job = Header(JOB, job=7, device=-2, version=3, epochs=2, has_payload=True, finish=12.25, payload_numel=NUMEL)
        t0 = time.monotonic()  # nothing is on its way yet: poll(0) and poll() return at once
        assert mailbox.poll(0) == [] and mailbox.poll() == [] and time.monotonic() - t0 < 1.0
        outbox.send(1, job, model)
        [(src, h, payload)] = mailbox.poll(None)  # None waits for the RESULT, as queue.get(timeout=None) does
        assert (src, h.kind, h.job, h.finish) == (1, RESULT, 7, 12.25)
        assert torch.equal(payload, model + 1)
        # A payload of the wrong size is refused by the receiver, whatever its header says.
        outbox.send(1, Header(JOB, job=8, has_payload=True, payload_numel=NUMEL + 3), torch.zeros(NUMEL + 3))
        [(src, h, payload)] = poll_until(mailbox, "BYE")
        assert (h.kind, payload) == (BYE, None) and mailbox.open_peers() == []
    else:
        [(src, h, payload)] = poll_until(mailbox, "JOB")
        assert (src, h.kind, h.job, h.device, h.version, h.epochs, h.finish) == (0, JOB, 7, -2, 3, 2, 12.25)
        assert payload.shape == (NUMEL,) and torch.equal(payload, model)
        outbox.send(0, Header(RESULT, job=h.job, has_payload=True, finish=h.finish, payload_numel=NUMEL), payload + 1)
        with pytest.raises(TransportError, match="receiving from rank 0") as err:
            poll_until(mailbox, "the wrong-size JOB")
        assert isinstance(err.value.__cause__, MessageError)
        outbox.send(0, Header(BYE))
    outbox.flush()
    outbox.close()
    dist.barrier()
    dist.destroy_process_group()


def test_job_and_result_travel_over_gloo_and_a_wrong_size_is_rejected(tmp_path):
    mp.spawn(_exchange, args=(str(tmp_path / "init"),), nprocs=2, join=True)


BIG_INDEX = (1 << 24) + 1  # a float32 holds it as 2^24: an index that travelled as a float would be off by one


def _compressed(rank, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    idx = torch.tensor([3, BIG_INDEX], dtype=torch.int32).view(torch.uint8)
    data = torch.cat([idx, torch.tensor([0.5, -2.0]).view(torch.uint8)])  # top-k's bytes: indices, then values
    mailbox, outbox = Mailbox([1 - rank], NUMEL, upload=(5, 16)), Outbox()
    if rank == 0:
        [(src, h, payload)] = poll_until(mailbox, "RESULT")
        assert (h.kind, h.codec, h.payload_numel, payload.dtype) == (RESULT, 5, 16, torch.uint8)
        assert torch.equal(payload, data) and payload[:8].clone().view(torch.int32)[1].item() == BIG_INDEX
        with pytest.raises(TransportError, match="receiving from rank 1") as err:
            poll_until(mailbox, "the RESULT of another codec")
        assert isinstance(err.value.__cause__, MessageError) and "codec 3, the run's is 5" in str(err.value.__cause__)
        outbox.send(1, Header(BYE))  # ends the peer's receiver
    else:
        outbox.send(0, Header(RESULT, job=1, has_payload=True, payload_numel=16, codec=5), data)
        outbox.send(0, Header(RESULT, job=2, has_payload=True, payload_numel=16, codec=3), data)
        poll_until(mailbox, "BYE")
    outbox.flush()
    outbox.close()
    dist.barrier()
    dist.destroy_process_group()


def test_a_compressed_result_travels_as_bytes_and_another_codec_is_refused(tmp_path):
    mp.spawn(_compressed, args=(str(tmp_path / "init"),), nprocs=2, join=True)
