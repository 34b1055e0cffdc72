"""Non-blocking point-to-point channels over torch.distributed ``isend``/``irecv``.

Gloo's send/recv work objects report ``is_completed() == False`` until someone calls
``wait()`` (the data has long arrived by then), so polling them does not work. Instead a
:class:`Mailbox` runs one receiver thread per peer: it posts the header ``irecv``, waits,
posts the payload ``irecv`` when the header says one follows, waits, and queues the message.
The owner polls the queue and never blocks on any one peer. An :class:`Outbox` queues each
message from the caller's thread; one sender thread posts its ``isend``s and waits on them,
in order, so tensors stay alive exactly until they are sent.

Nothing here can stall a GPU. Headers always travel on a gloo group as CPU tensors, so a
receiver waiting for an idle peer waits on the CPU only. Payloads travel on the
:class:`Channel`'s data group: by default the same gloo group (CPU tensors). A CUDA payload is
copied into pinned host memory on a side stream (``non_blocking``, ordered after the kernels
that made it by an event), so the copy overlaps whatever the caller does next, e.g. the next
job's training; the sender thread waits for the copy, never the caller. Received payloads
are CPU tensors; their user moves them to its GPU. Opt-in NCCL payloads (a data group on the
rank's GPU) are posted and waited for on side streams in the transport's own threads, never
on the stream training uses, and only once their header has arrived, so the matching send is
already under way. Each direction has its own groups (:func:`make_links`): NCCL runs a send
and a receive with the same peer on one communicator and stream. This module moves tensors
and decides nothing.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import NamedTuple

import torch
import torch.distributed as dist

from seafl_dist.transport.messages import (BYE, HEADER_LEN, HEADER_TAG, PAYLOAD_TAG, STOP, Header, check_payload,
                                           payload_dtype)

CPU = torch.device("cpu")


class TransportError(RuntimeError):
    """A receive or send failed (the peer died, or the process group broke)."""


class Channel(NamedTuple):
    """One direction of traffic: headers on ``control`` (gloo), payloads on ``data`` held on ``device``.

    ``None`` groups mean the default process group (gloo in the tests)."""
    control: object = None
    data: object = None
    device: torch.device = CPU


def make_links(payload_backend: str = "gloo", device: torch.device = CPU) -> tuple[Channel, Channel]:
    """``(down, up)``: the channels rank 0 → workers and workers → rank 0.

    Headers always go over gloo; payloads over the same gloo groups, or (``payload_backend``
    ``"nccl"``) over NCCL groups on ``device``. Every rank must call this, in the same order,
    right after ``init_process_group``."""
    down, up = dist.new_group(backend="gloo"), dist.new_group(backend="gloo")
    if payload_backend == "nccl":
        return Channel(down, dist.new_group(backend="nccl"), device), Channel(up, dist.new_group(backend="nccl"), device)
    return Channel(down, down, CPU), Channel(up, up, CPU)


def _side_stream(device: torch.device, cache: dict) -> "torch.cuda.Stream":
    if device not in cache:  # pool streams do not synchronise with the default stream
        cache[device] = torch.cuda.Stream(device)
    return cache[device]


class Outbox:
    """Queues messages; a sender thread posts and waits on each send in order."""

    def __init__(self, channel: Channel = Channel()) -> None:
        self.channel = channel
        self._items: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._streams: dict = {}
        self._thread = threading.Thread(target=self._send_loop, name="seafl-outbox", daemon=True)
        self._thread.start()

    def send(self, dst: int, header: Header, payload: torch.Tensor | None = None) -> None:
        if self._error is not None:
            raise TransportError(f"an earlier send failed: {self._error}")
        staged = self._stage(payload) if payload is not None else None
        self._items.put((dst, header.encode(), staged))

    def _stage(self, payload: torch.Tensor):
        """``(tensor to send, CUDA event after which it is ready or None, tensor to keep alive)``."""
        src = payload.detach().reshape(-1)
        src = src if src.dtype == torch.uint8 else src.to(torch.float32)  # a compressed upload's bytes stay bytes
        dev = self.channel.device
        if dev.type == "cuda":  # NCCL: the copy to the GPU runs on the caller's stream; send after it
            out = src.to(dev).contiguous()
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(dev))
            return out, ready, out
        if src.device.type != "cuda":
            return src.contiguous(), None, None
        side = _side_stream(src.device, self._streams)
        side.wait_stream(torch.cuda.current_stream(src.device))  # after the kernels that made it
        with torch.cuda.stream(side):
            host = torch.empty(src.numel(), dtype=src.dtype, pin_memory=True)
            host.copy_(src, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(side)
        return host, ready, src  # src stays alive until the copy is done

    def _send_loop(self) -> None:
        while True:
            item = self._items.get()
            try:
                if item is None:
                    return
                if self._error is None:  # after a failure, drain without sending so flush() returns
                    self._post(*item)
            except BaseException as err:  # reported on the next send() or flush()
                self._error = err
            finally:
                self._items.task_done()

    def _post(self, dst: int, header: torch.Tensor, staged) -> None:
        ch = self.channel
        works = [dist.isend(header, dst=dst, group=ch.control, tag=HEADER_TAG)]
        if staged is not None:
            tensor, ready, _alive = staged
            if tensor.device.type == "cuda":
                with torch.cuda.device(tensor.device), torch.cuda.stream(_side_stream(tensor.device, self._streams)):
                    torch.cuda.current_stream().wait_event(ready)
                    dist.isend(tensor, dst=dst, group=ch.data, tag=PAYLOAD_TAG).wait()
                    torch.cuda.current_stream().synchronize()  # this thread waits; no other stream does
            else:
                if ready is not None:
                    ready.synchronize()  # the side-stream copy into pinned memory
                works.append(dist.isend(tensor, dst=dst, group=ch.data, tag=PAYLOAD_TAG))
        for work in works:
            work.wait()

    def flush(self) -> None:
        """Block until every queued send has completed."""
        self._items.join()
        if self._error is not None:
            raise TransportError(f"a send failed: {self._error}")

    def close(self) -> None:
        self._items.put(None)


def _receive_payload(rank: int, numel: int, ch: Channel, streams: dict, dtype=torch.float32) -> torch.Tensor:
    if ch.device.type != "cuda":
        payload = torch.empty(numel, dtype=dtype)
        dist.irecv(payload, src=rank, group=ch.data, tag=PAYLOAD_TAG).wait()
        return payload
    with torch.cuda.stream(_side_stream(ch.device, streams)):  # wait() orders this side stream only
        buf = torch.empty(numel, dtype=dtype, device=ch.device)
        dist.irecv(buf, src=rank, group=ch.data, tag=PAYLOAD_TAG).wait()
        return buf.cpu()  # synchronises the side stream, in this thread


def _receive_loop(rank: int, numel: int, ch: Channel, out: queue.Queue, upload: tuple = (0, 0)) -> None:
    """Receive messages from ``rank`` until its last one (STOP or BYE); ``upload``: see check_payload."""
    streams: dict = {}
    try:
        if ch.device.type == "cuda":
            torch.cuda.set_device(ch.device)  # the current device is per thread
        while True:
            buf = torch.zeros(HEADER_LEN, dtype=torch.int64)
            dist.irecv(buf, src=rank, group=ch.control, tag=HEADER_TAG).wait()
            header = Header.decode(buf)
            payload = None
            if header.has_payload:
                payload = _receive_payload(rank, header.payload_numel, ch, streams, payload_dtype(header))
                check_payload(header, payload, numel, upload)
            out.put((rank, header, payload))
            if header.kind in (STOP, BYE):
                return
    except BaseException as err:
        out.put((rank, err, None))


class Mailbox:
    """Messages from a set of peers, as they fully arrive (payloads on the CPU); a peer is closed after STOP or BYE.
    ``upload``: (codec id, bytes) of the RESULTs a compressed run's workers send (0, 0: float32 models)."""

    def __init__(self, peers, numel: int, channel: Channel = Channel(), upload: tuple = (0, 0)):
        self._queue: queue.Queue = queue.Queue()
        self.peers = list(peers)
        self.closed: set[int] = set()
        self._threads = [threading.Thread(target=_receive_loop, args=(r, numel, channel, self._queue, upload),
                                          name=f"seafl-recv-{r}", daemon=True) for r in self.peers]
        for t in self._threads:
            t.start()

    def wait_closed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every peer's last message (or its error); True if all came."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def poll(self, timeout: float | None = 0.0) -> list[tuple[int, Header, torch.Tensor | None]]:
        """Every message that has arrived, waiting up to ``timeout`` seconds for the first: 0 returns
        at once, None waits until one comes (as ``queue.Queue.get`` does)."""
        got = []
        try:
            got.append(self._queue.get_nowait() if timeout is not None and timeout <= 0 else
                       self._queue.get(timeout=timeout))
            while True:
                got.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        for rank, header, _ in got:
            if isinstance(header, BaseException):
                raise TransportError(f"receiving from rank {rank} failed: {header}") from header
            if header.kind in (STOP, BYE):
                self.closed.add(rank)
        return got

    def open_peers(self) -> list[int]:
        return [r for r in self.peers if r not in self.closed]
