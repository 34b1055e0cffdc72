"""One upload: a trained flat model and its base in, bytes on the wire out, and back (stage 1 of SPEC's "One
aggregation, end to end").

With ``compression.codec: none`` the upload is the trained flat vector itself, as it always was. With a codec it is
one uint8 vector::

    [ codec bytes of Δ = w_k − w_{t_k} over the trainable parameters (codecs/formats.py) ]
    [ the statistics and counters of w_k, float32, exact, in flat order                  ]

and the receiver rebuilds w_k as its base plus the decoded delta on the parameters, the statistics and counters as
sent: a quantized running variance could go negative, and counters are taken by max. Its length,
:attr:`UpdateCodec.upload_bytes`, follows from the codec and the layout alone, so the clock charges it ahead.
"""
from __future__ import annotations

import math

import torch

from seafl_dist.codecs.formats import as_bytes, from_bytes, make_format

# what a RESULT header's ``codec`` field says (transport/messages.py): 0 is the float32 model
WIRE_IDS = {"none": 0, "fp16": 1, "bf16": 2, "int8": 3, "qsgd": 4, "topk": 5}


class UpdateCodec:
    """Encodes and decodes one model's uploads. ``layout``: the model's flat layout (``kinds`` and ``shapes`` per
    state_dict entry, as train/flat.py's FlatLayout has them)."""

    def __init__(self, section, layout):
        sizes = [math.prod(s) for s in layout.shapes]
        self.active = section.active
        self.name = section.codec
        self.wire_id = WIRE_IDS[section.codec]
        self.params = torch.cat([torch.full((n,), k == "param", dtype=torch.bool)
                                 for k, n in zip(layout.kinds, sizes)]) if sizes else torch.zeros(0, dtype=torch.bool)
        self.numel = int(self.params.numel())
        self.n_params = int(self.params.sum())
        self.all_params = self.n_params == self.numel
        self.model_bytes = 4 * self.numel
        self.format = make_format(section, [n for k, n in zip(layout.kinds, sizes) if k == "param"]) \
            if self.active else None
        self.upload_bytes = self.format.nbytes + 4 * (self.numel - self.n_params) if self.active else self.model_bytes
        self._masks: dict = {}

    @property
    def wire(self) -> tuple[int, int]:
        """(codec id, payload entries) of a RESULT: what its header says and the receiver checks."""
        return (self.wire_id, self.upload_bytes) if self.active else (0, 0)

    @property
    def ratio(self) -> float:
        """Upload bytes over the full float32 model's bytes (1 without a codec)."""
        return self.upload_bytes / self.model_bytes

    def _mask(self, device: torch.device) -> torch.Tensor:
        if device not in self._masks:
            self._masks[device] = self.params.to(device)
        return self._masks[device]

    def delta(self, trained: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """Δ = w_k − w_{t_k} over the trainable parameters, on the trained model's device."""
        diff = trained - base.to(trained.device)
        return diff if self.all_params else diff[self._mask(trained.device)]

    def pack(self, data: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
        """The upload: the codec's ``data`` followed by the exact statistics and counters of ``trained``."""
        if self.all_params:
            return data
        return torch.cat([data, as_bytes(trained[~self._mask(trained.device)].to(torch.float32))])

    def encode(self, trained: torch.Tensor, base: torch.Tensor, seed: int, feedback=None, *, device: int = -1,
               job: int = -1, finish: float = 0.0) -> torch.Tensor:
        """The upload of a job that trained ``trained`` from ``base``; ``seed``: its named stream (QSGD's rounding).
        With ``feedback`` (codecs/feedback.py), device ``device``'s residual is added first and what was not sent kept."""
        if not self.active:
            return trained
        delta = self.delta(trained, base)
        if feedback is None:
            return self.pack(self.format.encode(delta, seed), trained)
        corrected = feedback.corrected(device, delta)
        data = self.format.encode(corrected, seed)
        feedback.keep(device, job, finish, corrected, self.format.decode(data))
        return self.pack(data, trained)

    def check(self, payload: torch.Tensor) -> None:
        want = (torch.uint8, self.upload_bytes) if self.active else (torch.float32, self.numel)
        if payload.dim() != 1 or (payload.dtype, payload.numel()) != want:
            raise ValueError(f"an upload of {payload.numel()} {payload.dtype} values; {self.name} sends {want[1]} "
                             f"{want[0]} values for this model")

    def decode(self, payload: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """w_k from an upload and the job's base model (on the base's device)."""
        self.check(payload)
        if not self.active:
            return payload
        payload = payload.to(base.device)
        n = self.format.nbytes
        delta = self.format.decode(payload[:n])
        if self.all_params:
            return base + delta
        mask = self._mask(base.device)
        out = base.clone()
        out[mask] += delta
        out[~mask] = from_bytes(payload[n:], torch.float32)
        return out
