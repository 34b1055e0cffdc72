"""The virtual clock's speed model (SPEC "Virtual clock"): when each epoch of a job ends.

Device k computes one epoch in c_k = n_k * sec_per_sample seconds and then idles z_k seconds,
so epoch e of a job occupies [b_{e-1}, b_e) with b_e - b_{e-1} = c_k + z_k and
b_0 = start + download_s. Idle times are heavy-tailed and capped at ``idle.max``:

- ``zipf``: numpy's Zipf(s) (integers >= 1; s = 1.7 in the paper's preliminary study),
- ``pareto``: numpy's Pareto(a), i.e. the Lomax form with samples >= 0 (PLATO's draw),
- ``none``: z_k = 0.

``per_device`` draws z_k once per device from stream ("idle", k); ``per_epoch`` draws one
value per epoch from stream ("idle", k, j) where j counts that device's jobs, so a device's
timeline never depends on what other devices did.

Fast attackers (``threats.fast``, :func:`fastest_first`): the per-device draw is made as above, then the r
malicious devices take its r smallest values, and the honest devices they displace take the malicious devices'
own draws; every other device keeps its draw.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from seafl_dist.settings import ClockConfig
from seafl_dist.sim.rng import stream


def draw_idle(rng: np.random.Generator, distribution: str, *, s: float, a: float, cap: float, size: int) -> np.ndarray:
    """``size`` idle times from the named distribution, each capped at ``cap`` seconds."""
    if distribution == "none":
        return np.zeros(size)
    if distribution == "zipf":
        raw = rng.zipf(s, size=size).astype(np.float64)
    elif distribution == "pareto":
        raw = rng.pareto(a, size=size)
    else:
        raise ValueError(f"unknown idle distribution {distribution!r}")
    return np.minimum(raw, cap)


def scaled_upload(upload_s: float, upload_bytes: int, model_bytes: int) -> float:
    """``clock.upload_s`` (the full float32 model's upload) for an upload of ``upload_bytes`` instead of the model's
    ``model_bytes`` (``compression.codec``): the same link, fewer bytes. The trace checker uses this expression too."""
    return upload_s * (upload_bytes / model_bytes)


def fastest_first(idle: Sequence[float], malicious: Sequence[int]) -> list[float]:
    """The per-device idle times ``idle`` with the fastest given to the ``malicious`` devices (fast attackers).

    Let F be the r = |malicious| devices of smallest idle time (ties: lower device id). The malicious devices, by
    increasing id, take F's values in increasing order (ties: lower id first). The honest devices in F, by
    increasing id, take the values the malicious devices outside F had, in increasing order. Every other device
    keeps its value, so the multiset of idle times is the population's draw."""
    out = list(idle)
    bad = sorted(set(malicious))
    order = sorted(range(len(out)), key=lambda k: (out[k], k))
    fastest = order[:len(bad)]
    left = sorted(out[k] for k in bad if k not in set(fastest))
    displaced = sorted(k for k in fastest if k not in set(bad))
    new = dict(zip(bad, [out[k] for k in fastest]))
    new.update(zip(displaced, left))
    for k, z in new.items():
        out[k] = z
    return out


class SpeedModel:
    """Plans a job's epoch ends from the clock config, the run seed and each device's n_k; ``fast``: the fast
    attackers (:func:`fastest_first`), who take the smallest of the per-device idle times."""

    def __init__(self, clock: ClockConfig, n_samples: Sequence[int], seed: int, epochs: int,
                 fast: Sequence[int] = ()):
        self.clock, self.seed, self.epochs = clock, seed, epochs
        self.n_samples = list(n_samples)
        idle = clock.idle
        self._per_device = None
        if idle.distribution == "none":  # no draw at all: a million devices cost nothing here
            self._per_device = [0.0] * len(self.n_samples)
        elif idle.resample == "per_device":
            self._per_device = [float(draw_idle(stream(seed, "idle", k), idle.distribution, s=idle.s, a=idle.a,
                                                cap=idle.max, size=1)[0]) for k in range(len(self.n_samples))]
            if fast:
                self._per_device = fastest_first(self._per_device, fast)

    def compute_time(self, device: int) -> float:
        return self.n_samples[device] * self.clock.sec_per_sample

    def idle_times(self, device: int, device_job_index: int) -> list[float]:
        if self._per_device is not None:
            return [self._per_device[device]] * self.epochs
        idle = self.clock.idle
        rng = stream(self.seed, "idle", device, device_job_index)
        return [float(z) for z in draw_idle(rng, idle.distribution, s=idle.s, a=idle.a, cap=idle.max, size=self.epochs)]

    def plan(self, device: int, device_job_index: int, start: float) -> list[float]:
        """Absolute epoch ends [b_1, ..., b_E] of a job of ``device`` starting at ``start``."""
        c = self.compute_time(device)
        b = start + self.clock.download_s
        ends = []
        for z in self.idle_times(device, device_job_index):
            b = b + c + z
            ends.append(b)
        return ends


class ProfiledSpeed:
    """Epoch ends of a job on a profiled device (SPEC "Device populations").

    b_0 = start + the device's download time, each epoch lasts n_k × its profile's
    ``sec_per_sample`` × ``compute_scale`` plus its idle time, and the upload takes the model's
    bytes over its upload bandwidth. Idle times come from ``idle`` (a :class:`SpeedModel`, whose
    draws are kept) when ``clock.idle`` is set, else they are zero.
    """

    def __init__(self, population, n_samples: Sequence[int], epochs: int, idle: SpeedModel | None = None):
        self.population, self.n_samples, self.epochs, self.idle = population, n_samples, epochs, idle

    def comm(self, device: int) -> tuple[float, float]:
        """(download_s, upload_s) of the device's jobs."""
        return self.population.download_time(device), self.population.upload_time(device)

    def plan(self, device: int, device_job_index: int, start: float) -> list[float]:
        c = self.population.compute_time(device, self.n_samples[device])
        idle = self.idle.idle_times(device, device_job_index) if self.idle is not None else [0.0] * self.epochs
        b = start + self.population.download_time(device)
        ends = []
        for z in idle:
            b = b + c + z
            ends.append(b)
        return ends

    def min_idle(self) -> np.ndarray:
        """Per device: the least idle time an epoch can have (drawn per device: that value; per epoch:
        zipf's 1 s or pareto's 0, capped)."""
        n = len(self.n_samples)
        if self.idle is None:
            return np.zeros(n)
        if self.idle._per_device is not None:
            return np.asarray(self.idle._per_device, dtype=np.float64)
        idle = self.idle.clock.idle
        return np.full(n, min(1.0, idle.max) if idle.distribution == "zipf" else 0.0)

    def stall_reason(self) -> str | None:
        """Why no job could ever land, if so: every device's shortest job (download, E epochs with
        their least idle time, upload) is longer than its longest availability window. Vectorised."""
        pop = self.population
        prof = pop.device_profiles()
        n = np.asarray(self.n_samples, dtype=np.float64)
        epoch = n * pop.sec_per_sample[prof] * pop.compute_scale + self.min_idle()
        span = pop.model_bytes / pop.down[prof] + self.epochs * epoch + pop.upload_bytes / pop.up[prof]
        longest = pop.longest_windows()[prof]
        if np.any(span <= longest):
            return None
        i = int(np.argmin(span - longest))
        return (f"no job can land: every device's shortest job is longer than its longest availability window "
                f"(closest: device {i}, job {span[i]:g}s, window {longest[i]:g}s); lengthen the windows "
                f"(devices.availability_scale) or shorten the jobs")
