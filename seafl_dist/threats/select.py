"""Which devices are malicious: a pure function of the config, the same on every rank and after a resume.

``threats.malicious_devices`` names them; otherwise ``threats.malicious`` = f takes m = ⌊f·N + 1/2⌋ devices drawn
uniformly without replacement from the run's named stream ("malicious"), keyed by ``run.seed`` alone, so the
schedule's streams, the split and the training streams are the same as in the honest run with that seed.
"""
from __future__ import annotations

import math

from seafl_dist.sim.rng import stream


def malicious_devices(threats, num_devices: int, seed: int) -> tuple[int, ...]:
    """The malicious device ids, ascending (``threats``: the config's section; ``seed``: ``run.seed``)."""
    if threats.malicious_devices is not None:
        return tuple(sorted(int(d) for d in threats.malicious_devices))
    m = math.floor(threats.malicious * num_devices + 0.5)
    if m == 0:
        return ()
    return tuple(sorted(int(d) for d in stream(seed, "malicious").choice(num_devices, size=m, replace=False)))
