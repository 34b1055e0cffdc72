"""Message headers: a fixed-size int64 tensor, nothing pickled.

A message is a header (``HEADER_LEN`` int64) optionally followed by one flat float32 tensor
on the payload tag: of the model's size, or (LOGS) the bytes of a JSON object of what a job's
module logged, one byte a float (a worker sends it right before that job's RESULT). Fields:

    kind, job, device, version, epochs, has_payload, finish (float64 bits), payload_numel

``finish`` is the job's virtual finish time (workers run their queue earliest-finish first).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import torch

HEADER_LEN = 8
HEADER_TAG = 1
PAYLOAD_TAG = 2

JOB = 1  # rank 0 -> worker: train this job (payload: the global model, if the worker lacks it)
RESULT = 2  # worker -> rank 0: the trained model of a job (payload always)
STOP = 3  # rank 0 -> worker: no more jobs; answer BYE after the results already sent
BYE = 4  # worker -> rank 0: last message of this worker
LOGS = 5  # worker -> rank 0: what the job's module logged ({name: value}), before its RESULT
KINDS = {JOB: "job", RESULT: "result", STOP: "stop", BYE: "bye", LOGS: "logs"}
MAX_LOG_BYTES = 1 << 20


class MessageError(ValueError):
    """A message that does not decode (unknown kind, wrong size)."""


@dataclass(frozen=True)
class Header:
    kind: int
    job: int = -1
    device: int = -1
    version: int = -1
    epochs: int = 0
    has_payload: bool = False
    finish: float = 0.0
    payload_numel: int = 0

    def encode(self) -> torch.Tensor:
        finish_bits = int(torch.tensor([self.finish], dtype=torch.float64).view(torch.int64)[0])
        return torch.tensor([self.kind, self.job, self.device, self.version, self.epochs, int(self.has_payload),
                             finish_bits, self.payload_numel], dtype=torch.int64)

    @classmethod
    def decode(cls, t: torch.Tensor) -> "Header":
        if t.dtype != torch.int64 or t.shape != (HEADER_LEN,):
            raise MessageError(f"header must be int64 of shape ({HEADER_LEN},), got {t.dtype} {tuple(t.shape)}")
        v = t.tolist()
        if v[0] not in KINDS:
            raise MessageError(f"unknown message kind {v[0]}")
        finish = float(torch.tensor([v[6]], dtype=torch.int64).view(torch.float64)[0])
        return cls(kind=v[0], job=v[1], device=v[2], version=v[3], epochs=v[4], has_payload=bool(v[5]),
                   finish=finish, payload_numel=v[7])


def encode_logs(values: dict) -> torch.Tensor:
    """``{name: float}`` as a LOGS payload: its JSON text's UTF-8 bytes, one float32 each (exact, and
    unchanged by any copy of a float tensor; nothing pickled)."""
    data = json.dumps(values).encode()
    if len(data) > MAX_LOG_BYTES:
        raise MessageError(f"logged values of {len(data)} bytes; at most {MAX_LOG_BYTES} travel with an update")
    return torch.tensor(list(data), dtype=torch.float32)


def decode_logs(payload: torch.Tensor) -> dict:
    """The ``{name: float}`` of a LOGS payload."""
    values = json.loads(bytes(payload.to(torch.uint8).tolist()).decode())
    if not isinstance(values, dict):
        raise MessageError("a logs message does not hold a JSON object")
    return {str(k): float(v) for k, v in values.items()}


def check_payload(header: Header, payload: torch.Tensor, expected_numel: int) -> None:
    """Reject a payload whose size disagrees with the header or with the model (LOGS: with the header only)."""
    if header.kind == LOGS:
        expected_numel = header.payload_numel if 0 < header.payload_numel <= MAX_LOG_BYTES else -1
    if payload.dim() != 1 or payload.numel() != expected_numel or header.payload_numel != expected_numel:
        raise MessageError(f"{KINDS[header.kind]} message for job {header.job}: payload of {payload.numel()} values "
                           f"(header says {header.payload_numel}), the model has {expected_numel}")
