"""Non-blocking point-to-point channels over torch.distributed ``isend``/``irecv``.

Gloo's send/recv work objects report ``is_completed() == False`` until someone calls
``wait()`` (the data has long arrived by then), so polling them does not work. Instead a
:class:`Mailbox` runs one receiver thread per peer: it posts the header ``irecv``, waits,
posts the payload ``irecv`` when the header says one follows, waits, and queues the message.
The owner polls the queue and never blocks on any one peer. An :class:`Outbox` posts
``isend``s from the caller's thread and a reaper thread waits on them in order, so tensors
stay alive exactly until they are sent. Tensors travel on ``comm_device`` (CPU for gloo, the
rank's GPU for NCCL). Each direction has its own process group (:func:`make_links`): NCCL
runs a send and a receive with the same peer on one communicator and stream, so a receive
kept posted from a peer would block every send to it. This module moves tensors and decides
nothing.
"""
from __future__ import annotations

import queue
import threading

import torch
import torch.distributed as dist

from seafl_dist.transport.messages import BYE, HEADER_LEN, HEADER_TAG, PAYLOAD_TAG, STOP, Header, check_payload


class TransportError(RuntimeError):
    """A receive or send failed (the peer died, or the process group broke)."""


def make_links(backend: str):
    """``(down, up)``: the process groups for rank 0 → workers and workers → rank 0.

    Every rank must call this, in the same order, right after ``init_process_group``."""
    return dist.new_group(backend=backend), dist.new_group(backend=backend)


class Outbox:
    """Posts isends; a reaper thread waits on each until it completes, keeping its tensor alive."""

    def __init__(self, group=None) -> None:
        self.group = group
        self._works: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._reap, name="seafl-outbox", daemon=True)
        self._thread.start()

    def _reap(self) -> None:
        while True:
            item = self._works.get()
            try:
                if item is None:
                    return
                item[0].wait()
            except BaseException as err:  # keep draining so flush() returns; report on the next call
                self._error = err
            finally:
                self._works.task_done()

    def send(self, dst: int, header: Header, payload: torch.Tensor | None = None,
             comm_device: torch.device = torch.device("cpu")) -> None:
        if self._error is not None:
            raise TransportError(f"an earlier send failed: {self._error}")
        h = header.encode().to(comm_device)
        self._works.put((dist.isend(h, dst=dst, group=self.group, tag=HEADER_TAG), h))
        if payload is not None:
            p = payload.to(comm_device, torch.float32).contiguous()
            self._works.put((dist.isend(p, dst=dst, group=self.group, tag=PAYLOAD_TAG), p))

    def flush(self) -> None:
        """Block until every posted send has completed."""
        self._works.join()
        if self._error is not None:
            raise TransportError(f"a send failed: {self._error}")

    def close(self) -> None:
        self._works.put(None)


def _receive_loop(rank: int, numel: int, dev: torch.device, group, out: queue.Queue) -> None:
    """Receive messages from ``rank`` until its last one (STOP or BYE)."""
    try:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)  # the current device is per thread
        while True:
            buf = torch.zeros(HEADER_LEN, dtype=torch.int64, device=dev)
            dist.irecv(buf, src=rank, group=group, tag=HEADER_TAG).wait()
            header = Header.decode(buf.cpu())
            payload = None
            if header.has_payload:
                payload = torch.empty(header.payload_numel, dtype=torch.float32, device=dev)
                dist.irecv(payload, src=rank, group=group, tag=PAYLOAD_TAG).wait()
                check_payload(header, payload, numel)
                payload = payload.cpu()
            out.put((rank, header, payload))
            if header.kind in (STOP, BYE):
                return
    except BaseException as err:
        out.put((rank, err, None))


class Mailbox:
    """Messages from a set of peers, as they fully arrive; a peer is closed after STOP or BYE."""

    def __init__(self, peers, numel: int, comm_device: torch.device = torch.device("cpu"), group=None):
        self._queue: queue.Queue = queue.Queue()
        self.peers = list(peers)
        self.closed: set[int] = set()
        for r in self.peers:
            threading.Thread(target=_receive_loop, args=(r, numel, comm_device, group, self._queue),
                             name=f"seafl-recv-{r}", daemon=True).start()

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
