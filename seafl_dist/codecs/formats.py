"""The codecs of a parameter delta v (float32, P entries): each turns v into bytes and back, and says how many bytes
before it sees v (a function of P and the parameters' tensor sizes only). Little-endian throughout.

| codec | bytes on the wire | layout |
|---|---|---|
| ``fp16``, ``bf16`` | 2P | v rounded to nearest, 2 bytes an entry |
| ``int8`` | 4T + P | T float32 scales (one per parameter tensor, max|v|/127), then P int8 codes round(v/scale) |
| ``qsgd`` | 4⌈P/d⌉ + ⌈P·b/8⌉ | ⌈P/d⌉ float32 bucket norms, then P codes c + s of b = ⌈log₂(2s+1)⌉ bits (codecs/bits.py) |
| ``topk`` | 8k, k = ⌈f·P⌉ | k int32 indices (ascending), then k float32 values |

QSGD (Alistarh et al. 2017, Sec. 3.1, with buckets as in its experiments): bucket u of d entries (the last one may be
shorter) sends ‖u‖₂ and, per entry, c_i = sign(u_i)·ξ_i with ξ_i = ⌊x_i⌋ + [r_i < x_i − ⌊x_i⌋], x_i = s·|u_i|/‖u‖₂
and r_i uniform in [0, 1) from the job's named stream; the receiver reads ‖u‖₂·c_i/s. Then E[Q(u)] = u and
E‖Q(u) − u‖² ≤ min(d/s², √d/s)·‖u‖² (its Lemma 3.1). Codes are fixed-width, not Elias-coded: the size must not depend
on the values (SPEC "Invariants"). Top-k keeps the k entries of largest |v_i| (ties: torch.topk's choice) exactly.
"""
from __future__ import annotations

import math

import torch


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as a uint8 vector (its dtype's little-endian bits, nothing converted)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def from_bytes(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``data`` (uint8) read as ``dtype``: the inverse of :func:`as_bytes` (copied, so any offset is aligned)."""
    return data.clone().view(dtype)


class Half:
    """``fp16`` or ``bf16``: every entry in 2 bytes."""

    def __init__(self, dtype: torch.dtype, numel: int):
        self.dtype, self.numel = dtype, numel
        self.nbytes = 2 * numel

    def encode(self, v: torch.Tensor, seed: int) -> torch.Tensor:
        return as_bytes(v.to(self.dtype))

    def decode(self, data: torch.Tensor) -> torch.Tensor:
        return from_bytes(data, self.dtype).to(torch.float32)


class Int8:
    """One float32 scale per parameter tensor (max |v| / 127), codes round(v / scale) in [−127, 127]."""

    def __init__(self, sizes: list[int]):
        self.sizes, self.numel = list(sizes), sum(sizes)
        self.nbytes = 4 * len(self.sizes) + self.numel

    def encode(self, v: torch.Tensor, seed: int) -> torch.Tensor:
        parts = v.split(self.sizes)
        scales = torch.stack([p.abs().max() if p.numel() else v.new_zeros(()) for p in parts]) / 127
        safe = torch.where(scales > 0, scales, torch.ones_like(scales))
        per_entry = torch.repeat_interleave(safe, torch.tensor(self.sizes, device=v.device))
        codes = torch.round(v / per_entry).clamp_(-127, 127).to(torch.int8)
        return torch.cat([as_bytes(scales.to(torch.float32)), as_bytes(codes)])

    def decode(self, data: torch.Tensor) -> torch.Tensor:
        t = len(self.sizes)
        scales = from_bytes(data[:4 * t], torch.float32)
        codes = from_bytes(data[4 * t:], torch.int8).to(torch.float32)
        return codes * torch.repeat_interleave(scales, torch.tensor(self.sizes, device=data.device))


class QSGD:
    """s levels per sign over buckets of d entries (module docstring)."""

    def __init__(self, numel: int, levels: int, bucket: int):
        self.numel, self.s, self.d = numel, levels, bucket
        self.width = max(1, math.ceil(math.log2(2 * levels + 1)))
        self.buckets = -(-numel // bucket)
        self.nbytes = 4 * self.buckets + (numel * self.width + 7) // 8

    def _norms(self, v: torch.Tensor) -> torch.Tensor:
        padded = torch.cat([v, v.new_zeros(self.buckets * self.d - self.numel)])
        return padded.reshape(self.buckets, self.d).norm(dim=1)

    def encode(self, v: torch.Tensor, seed: int) -> torch.Tensor:
        from seafl_dist.codecs.bits import pack
        norms = self._norms(v)
        per_entry = torch.repeat_interleave(norms, self.d)[:self.numel]
        x = torch.where(per_entry > 0, v.abs() / torch.where(per_entry > 0, per_entry, 1.0) * self.s, 0.0)
        x = x.clamp_(max=self.s)  # rounding may put |u_i|/‖u‖ a hair above 1
        floor = x.floor()
        gen = torch.Generator().manual_seed(seed)  # on the CPU: the same draws on every rank and device
        r = torch.rand(self.numel, generator=gen).to(v.device)
        xi = floor + (r < x - floor).to(x.dtype)
        codes = (torch.sign(v) * xi).to(torch.int64) + self.s
        return torch.cat([as_bytes(norms.to(torch.float32)), pack(codes, self.width)])

    def decode(self, data: torch.Tensor) -> torch.Tensor:
        from seafl_dist.codecs.bits import unpack
        norms = from_bytes(data[:4 * self.buckets], torch.float32)
        codes = unpack(data[4 * self.buckets:], self.width, self.numel) - self.s
        return torch.repeat_interleave(norms, self.d)[:self.numel] * codes.to(torch.float32) / self.s


class TopK:
    """The k = ⌈fraction·P⌉ entries of largest magnitude, exact; indices bit-cast int32, never float values."""

    def __init__(self, numel: int, fraction: float):
        if numel >= 2 ** 31:
            raise ValueError(f"top-k indexes at most 2^31 − 1 parameters with int32 indices, not {numel}")
        self.numel = numel
        self.k = min(numel, max(1, math.ceil(fraction * numel)))
        self.nbytes = 8 * self.k

    def encode(self, v: torch.Tensor, seed: int) -> torch.Tensor:
        idx = torch.topk(v.abs(), self.k, sorted=False).indices.sort().values
        return torch.cat([as_bytes(idx.to(torch.int32)), as_bytes(v[idx].to(torch.float32))])

    def decode(self, data: torch.Tensor) -> torch.Tensor:
        idx = from_bytes(data[:4 * self.k], torch.int32).to(torch.int64)
        out = torch.zeros(self.numel, dtype=torch.float32, device=data.device)
        out[idx] = from_bytes(data[4 * self.k:], torch.float32)
        return out


def make_format(section, sizes: list[int]):
    """The codec of ``section.codec`` for a delta over parameter tensors of ``sizes`` entries."""
    numel = sum(sizes)
    if section.codec in ("fp16", "bf16"):
        return Half(torch.float16 if section.codec == "fp16" else torch.bfloat16, numel)
    if section.codec == "int8":
        return Int8(sizes)
    if section.codec == "qsgd":
        return QSGD(numel, section.levels, section.bucket)
    if section.codec == "topk":
        return TopK(numel, section.fraction)
    raise ValueError(f"unknown codec {section.codec!r}")
