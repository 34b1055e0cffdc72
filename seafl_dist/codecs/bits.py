"""Fixed-width codes packed into bytes, least significant bit first (QSGD's codes: docs/compression.md).

Code i of width w occupies bits [i·w, (i+1)·w) of the byte string, bit j of a byte being its 2^j place, so n codes
take exactly ⌈n·w / 8⌉ bytes. Pure tensor arithmetic on the codes' device (a GPU packs on the GPU).
"""
from __future__ import annotations

import torch


def packed_bytes(n: int, width: int) -> int:
    """Bytes of ``n`` codes of ``width`` bits."""
    return (n * width + 7) // 8


def pack(codes: torch.Tensor, width: int) -> torch.Tensor:
    """``codes`` (non-negative integers below 2^width) as a uint8 tensor of ``packed_bytes(n, width)``."""
    n = codes.numel()
    codes = codes.reshape(-1).to(torch.int32)
    bits = torch.empty((n, width), dtype=torch.uint8, device=codes.device)
    for j in range(width):
        bits[:, j] = (codes >> j) & 1
    flat = bits.reshape(-1)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = torch.tensor([1 << j for j in range(8)], dtype=torch.int32, device=codes.device)
    return (flat.reshape(-1, 8).to(torch.int32) * weights).sum(1).to(torch.uint8)


def unpack(data: torch.Tensor, width: int, n: int) -> torch.Tensor:
    """The ``n`` codes of ``width`` bits in ``data`` (uint8), as int64."""
    if data.numel() != packed_bytes(n, width):
        raise ValueError(f"{data.numel()} bytes hold {n} codes of {width} bits only as {packed_bytes(n, width)}")
    data = data.reshape(-1).to(torch.int32)
    bits = torch.empty((data.numel(), 8), dtype=torch.int32, device=data.device)
    for j in range(8):
        bits[:, j] = (data >> j) & 1
    bits = bits.reshape(-1)[:n * width].reshape(n, width)
    out = torch.zeros(n, dtype=torch.int64, device=data.device)
    for j in range(width):
        out |= bits[:, j].to(torch.int64) << j
    return out
