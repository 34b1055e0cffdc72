"""Stage 5: Gaussian noise N(0, σ² I), σ = z·S, on the rule's result, and batch norm's variance kept ≥ 0 after it.

Where the noise comes from (``privacy.*``, docs/privacy.md "Where the noise comes from"):

- **keyed** (the default): a cryptographic stream keyed by the run's secret key (privacy/keys.py), SHAKE-256 of
  the key with the named stream ``privacy``, the aggregation t, the chunk and the draw as its nonce
  (:class:`KeyedStream`). It feeds the same sampler as the secure mode below, so each draw is as hard to invert,
  and a resume with the kept key draws the very same noise again: exact bytes, nothing released twice. Nobody
  without the key can regenerate it: a generator seeded from a hash of the key (MT19937) would not do, its state
  is recovered from its outputs; SHAKE-256's is not.
- **secure** (``privacy.secure_noise``): every draw from the OS's cryptographic source (``os.urandom``), nothing
  kept; a resume replays what was released from a server-private write-ahead record (privacy/released.py).
- **seeded** (``privacy.seeded_noise``, for studies only): torch's generator seeded from the run's named stream
  ``privacy`` keyed by t (:func:`noise_seed`), in float64 on the CPU. Anyone holding config.yaml can regenerate
  it and subtract it, so its ε holds against no reader of the config; the run says so.

The sampler of the keyed and secure modes (:func:`secure_normal`): each N(0, 1) is the sum of four Box–Muller
draws from 53-bit uniforms, halved, as Opacus's ``secure_mode`` does after Holohan and Braghin (arXiv 2107.10138,
§5.1): a single float64 Gaussian draw can be inverted from its low bits (Mironov 2012 for the Laplace; Jin et al.,
arXiv 2112.05307, for Gaussians); the sum of several makes that search 2^(53·3) steps. Every mode draws in
float64 on the CPU and adds once, rounding to w′'s dtype, so the bits are the same on any device and rank.

It covers the entries the clipping bound covers (trainable parameters and float statistics); integer counters
take none. A running variance that the noise drives below 0 would make batch norm divide by the root of a
negative number: :func:`clamp_variance` sets it to 0 (batch norm adds its ε), which is post-processing of the
released w′ and costs no privacy.
"""
from __future__ import annotations

import hashlib
import math
import os
import struct
from typing import Callable, Iterable, Union

import torch

from ..sim.rng import stream_seed

VARIANCE_SUFFIX = "running_var"


def noise_seed(run_seed: int, version: int) -> int:
    """The seed of aggregation ``version``'s noise: the run's named stream ``privacy``, keyed by the version."""
    return stream_seed(run_seed, "privacy", version)


SECURE_TERMS = 4  # Gaussians summed per secure draw (Opacus's secure_mode: 2n with n = 2), then divided by 2
_CHUNK = 1 << 20  # entries drawn per os.urandom call: bounded memory for a model of any size


Bytes = Callable[[int, int, int], bytes]  # (chunk, draw, nbytes) -> that many random bytes


def os_bytes(chunk: int, draw: int, nbytes: int) -> bytes:
    """The secure mode's bytes: the OS's cryptographic source, whatever the chunk and draw."""
    return os.urandom(nbytes)


class KeyedStream:
    """The keyed mode's bytes for one aggregation: SHAKE-256 over a domain tag, the key (length-prefixed), the
    stream name ``privacy``, the aggregation ``version`` and the (chunk, draw) being made. Distinct nonces give
    independent streams; the same key and nonce give the same bytes in any process."""

    TAG = b"seafl-dp-noise/v1\0"

    def __init__(self, key: bytes, version: int, stream: str = "privacy"):
        name = stream.encode()
        self.prefix = self.TAG + struct.pack(">I", len(key)) + key + struct.pack(">I", len(name)) + name + \
            struct.pack(">Q", version)

    def __call__(self, chunk: int, draw: int, nbytes: int) -> bytes:
        return hashlib.shake_256(self.prefix + struct.pack(">QI", chunk, draw)).digest(nbytes)


def _uniform53(raw: bytes) -> torch.Tensor:
    """Uniforms in (0, 1] in float64 from 8 bytes each: (k + 1)·2⁻⁵³, k the top 53 bits of the 8 bytes."""
    bits = torch.frombuffer(bytearray(raw), dtype=torch.int64)
    return ((bits >> 11) & ((1 << 53) - 1)).to(torch.float64).add_(1.0).mul_(2.0 ** -53)


def secure_normal(n: int, source: Bytes = os_bytes) -> torch.Tensor:
    """``n`` draws of N(0, 1) in float64 from ``source``'s bytes (the OS's cryptographic source by default, or a
    :class:`KeyedStream`): each the sum of ``SECURE_TERMS`` Box–Muller normals divided by √SECURE_TERMS (= 2)."""
    out = torch.empty(n, dtype=torch.float64)
    for chunk, start in enumerate(range(0, n, _CHUNK)):
        m = min(_CHUNK, n - start)
        acc = torch.zeros(m, dtype=torch.float64)
        for term in range(SECURE_TERMS):
            radius = _uniform53(source(chunk, 2 * term, 8 * m)).log_().mul_(-2.0).sqrt_()
            acc.add_(radius.mul_(torch.cos(_uniform53(source(chunk, 2 * term + 1, 8 * m)).mul_(2.0 * math.pi))))
        out[start:start + m] = acc.div_(math.sqrt(SECURE_TERMS))
    return out


Source = Union[int, KeyedStream, None]  # a seed (seeded mode), a keyed stream, None (os.urandom)


@torch.no_grad()
def add_noise(flat: torch.Tensor, std: float, mask: torch.Tensor, source: Source) -> torch.Tensor:
    """A copy of ``flat`` with N(0, std²) added to each ``mask`` entry, drawn from ``source``: an int seeds torch's
    generator (the seeded mode), a :class:`KeyedStream` feeds :func:`secure_normal` (keyed), None draws from the
    OS's cryptographic source (secure, unrepeatable)."""
    if not std >= 0:
        raise ValueError(f"noise standard deviation {std} must be >= 0")
    mask = mask.to(flat.device)
    count = int(mask.sum())
    if source is None:
        noise = secure_normal(count) * std
    elif isinstance(source, KeyedStream):
        noise = secure_normal(count, source) * std
    else:
        noise = torch.randn(count, generator=torch.Generator(device="cpu").manual_seed(source),
                            dtype=torch.float64) * std
    out = flat.clone()
    out[mask] = (flat[mask].to(torch.float64) + noise.to(flat.device)).to(flat.dtype)
    return out


def variance_mask(names: Iterable[str], sizes: Iterable[int]) -> torch.Tensor:
    """A bool vector over a flat model (state_dict order, ``train.flat.FlatLayout``'s names and entry sizes):
    True on batch norm's running variances."""
    parts = [torch.full((n,), name.endswith(VARIANCE_SUFFIX), dtype=torch.bool) for name, n in zip(names, sizes)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)


@torch.no_grad()
def clamp_variance(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``flat`` with every ``mask`` entry below 0 set to 0 (a copy only when one is)."""
    mask = mask.to(flat.device)
    if not bool((flat[mask] < 0).any()):
        return flat
    out = flat.clone()
    out[mask] = flat[mask].clamp(min=0)
    return out
