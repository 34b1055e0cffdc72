"""Message headers: a fixed-size int64 tensor, nothing pickled.

A message is a header (``HEADER_LEN`` int64) optionally followed by one flat tensor on the payload
tag: a float32 model (JOB; RESULT without a codec), a RESULT's compressed upload as uint8 bytes (its
header's ``codec`` is not 0: ``compression.codec``, codecs/), or (LOGS) the bytes of a JSON object of
what a job's module logged, one byte a float32 (a worker sends it right before that job's RESULT). Fields:

    kind, job, device, version, epochs, has_payload, finish (float64 bits), payload_numel, codec

``payload_numel`` counts the payload's entries: floats, or bytes of a compressed upload (whose top-k
indices are int32 bit patterns inside those bytes, never float32 values, which are exact only to 2^24).

``finish`` is the job's virtual finish time (workers run their queue earliest-finish first).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import torch

HEADER_LEN = 10
HEADER_TAG = 1
PAYLOAD_TAG = 2

JOB = 1  # rank 0 -> worker: train this job (payload: the global model, if the worker lacks it)
RESULT = 2  # worker -> rank 0: the trained model of a job (payload always)
STOP = 3  # rank 0 -> worker: no more jobs; answer BYE after the results already sent
BYE = 4  # worker -> rank 0: last message of this worker
LOGS = 5  # worker -> rank 0: what the job's module logged ({name: value}), before its RESULT
# error feedback under torchrun (runtime/residuals.py), no payload:
TAKEN = 6  # rank 0 -> worker: the server took job ``job``'s upload (a resume never trains it again)
SAVE = 7  # rank 0 -> worker: write your devices' residuals as of aggregation ``version``
SAVED = 8  # worker -> rank 0: written (``version``; ``job``: the file's bytes)
KINDS = {JOB: "job", RESULT: "result", STOP: "stop", BYE: "bye", LOGS: "logs", TAKEN: "taken", SAVE: "save",
         SAVED: "saved"}
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
    codec: int = 0  # a RESULT's codec id (codecs/update.py WIRE_IDS); 0: the float32 model
    steps: int = 0  # a JOB's local steps when step-counted (FedCompass); 0: its epochs whole

    def encode(self) -> torch.Tensor:
        finish_bits = int(torch.tensor([self.finish], dtype=torch.float64).view(torch.int64)[0])
        return torch.tensor([self.kind, self.job, self.device, self.version, self.epochs, int(self.has_payload),
                             finish_bits, self.payload_numel, self.codec, self.steps], dtype=torch.int64)

    @classmethod
    def decode(cls, t: torch.Tensor) -> "Header":
        if t.dtype != torch.int64 or t.shape != (HEADER_LEN,):
            raise MessageError(f"header must be int64 of shape ({HEADER_LEN},), got {t.dtype} {tuple(t.shape)}")
        v = t.tolist()
        if v[0] not in KINDS:
            raise MessageError(f"unknown message kind {v[0]}")
        finish = float(torch.tensor([v[6]], dtype=torch.int64).view(torch.float64)[0])
        return cls(kind=v[0], job=v[1], device=v[2], version=v[3], epochs=v[4], has_payload=bool(v[5]),
                   finish=finish, payload_numel=v[7], codec=v[8], steps=v[9])


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


def payload_dtype(header: Header) -> torch.dtype:
    """A payload travels as bytes when its header names a codec, else as float32."""
    return torch.uint8 if header.codec else torch.float32


def check_payload(header: Header, payload: torch.Tensor, expected_numel: int, upload: tuple = (0, 0)) -> None:
    """Reject a payload whose size disagrees with the header or with the model (LOGS: with the header only);
    ``upload``: (codec id, bytes) of the run's RESULTs when a codec is on, whose codec and length must match."""
    what = "the model has"
    if header.kind == LOGS:
        expected_numel = header.payload_numel if 0 < header.payload_numel <= MAX_LOG_BYTES else -1
    elif header.kind == RESULT and (header.codec or upload[0]):
        if header.codec != upload[0]:
            raise MessageError(f"result message for job {header.job}: codec {header.codec}, the run's is {upload[0]}")
        expected_numel, what = upload[1], f"codec {upload[0]} sends"
    if payload.dim() != 1 or payload.numel() != expected_numel or header.payload_numel != expected_numel \
            or payload.dtype != payload_dtype(header):
        raise MessageError(f"{KINDS[header.kind]} message for job {header.job}: payload of {payload.numel()} "
                           f"{payload.dtype} values (header says {header.payload_numel}), {what} {expected_numel}")
