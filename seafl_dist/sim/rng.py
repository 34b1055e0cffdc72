"""Named random streams (SPEC "Virtual clock").

Every draw in a run comes from a stream named by (run seed, purpose, keys...), e.g.
``stream(seed, "idle", device)`` or ``stream(seed, "train", device, job)``. Streams are
independent of one another, so adding a device, a job or a rank never shifts anyone
else's draws.

The entropy is (seed, crc32(purpose), number of keys, keys...). numpy's ``SeedSequence`` pads
short entropy with zeros, so without the count ``stream(s, "idle", k)`` would draw exactly what
``stream(s, "idle", k, 0)`` draws; with it, keys of different lengths never collide.
"""
from __future__ import annotations

import zlib

import numpy as np


def stream_key(seed: int, purpose: str, *keys: int) -> list[int]:
    """The integer entropy list behind a named stream (usable as a SeedSequence entropy)."""
    if seed < 0 or any(k < 0 for k in keys):
        raise ValueError(f"stream keys must be non-negative, got seed={seed} keys={keys}")
    return [int(seed), zlib.crc32(purpose.encode()), len(keys), *map(int, keys)]


def stream(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A numpy Generator for the named stream."""
    return np.random.default_rng(stream_key(seed, purpose, *keys))


def stream_seed(seed: int, purpose: str, *keys: int) -> int:
    """A 63-bit integer seed for the named stream (for torch.Generator.manual_seed)."""
    return int(np.random.SeedSequence(stream_key(seed, purpose, *keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))
