"""A population of devices on profiles (SPEC "Device populations"): who is online when, how fast.

    table = read_profiles("profile.csv")
    pop = Population(table, num_devices=1_000_000, data_seed=0, availability_scale=0.001,
                     compute_scale=1.0, model_bytes=4 * n_params)
    pop.is_available(k, t); pop.next_online(k, t); pop.window_end(k, t)
    pop.compute_time(k, n_k); pop.download_time(k); pop.upload_time(k)

**Which profile device k takes.** One permutation ``perm`` of the P rows is drawn from the named
stream (data.seed, "profiles"); device k takes row ``perm[k mod P]``. The population is part of
the world, like the split, hence ``data.seed``. Every row is used ⌊N/P⌋ or ⌈N/P⌉ times, N <= P
gives every device its own row, adding devices never changes an earlier device's row, and the
cost is one O(P) draw, nothing per device (a named stream per device would cost ~15 µs each,
15 s at a million devices).

**Availability.** A profile's windows (times × ``availability_scale``) repeat every period: the
window i of cycle k is [k·period + on_i, k·period + off_i), computed by that one float
expression everywhere, so ``next_online(t)`` returns a time at which ``is_available`` is true
and ``window_end`` is exactly the instant a job is dropped. Without a period the windows happen
once; ``always`` is online at every t >= 0.

The vectorised forms (``eligible``, ``next_wake``) answer for all N devices at once in numpy,
O(N + windows) per call (the trace checker's questions). The scheduler asks by residue instead
(``residue_online``, ``residue_next_online``: O(P + windows)), since device k's row depends only on
k mod P; sim/churn.py's :class:`~seafl_dist.sim.churn.Idle` turns that into the idle online devices.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from seafl_dist.sim.profiles import ProfileTable
from seafl_dist.sim.rng import stream


class Population:
    def __init__(self, table: ProfileTable, num_devices: int, data_seed: int, *, availability_scale: float = 1.0,
                 compute_scale: float = 1.0, model_bytes: int = 0, upload_bytes: Optional[int] = None):
        if not availability_scale > 0 or not compute_scale >= 0 or model_bytes < 0:
            raise ValueError(f"need availability_scale > 0 ({availability_scale}), compute_scale >= 0 "
                             f"({compute_scale}), model_bytes >= 0 ({model_bytes})")
        rows = table.rows
        self.table, self.num_devices, self.model_bytes = table, num_devices, int(model_bytes)
        # what a download and an upload carry: the float32 model down, the codec's bytes up (compression.codec)
        self.upload_bytes = self.model_bytes if upload_bytes is None else int(upload_bytes)
        self.compute_scale = compute_scale
        self.perm = stream(data_seed, "profiles").permutation(len(rows)).astype(np.int64)
        self.sec_per_sample = np.array([r.sec_per_sample for r in rows], dtype=np.float64)
        self.down = np.array([r.download_bytes_per_s for r in rows], dtype=np.float64)
        self.up = np.array([r.upload_bytes_per_s for r in rows], dtype=np.float64)
        s = float(availability_scale)
        self.always = np.array([r.windows is None for r in rows])
        # period 0.0: windows happen once
        self.period = np.array([0.0 if r.period is None else r.period * s for r in rows], dtype=np.float64)
        wins = [(p, on * s, off * s) for p, r in enumerate(rows) if r.windows is not None for on, off in r.windows]
        self.w_owner = np.array([w[0] for w in wins], dtype=np.int64)
        self.w_on = np.array([w[1] for w in wins], dtype=np.float64)
        self.w_off = np.array([w[2] for w in wins], dtype=np.float64)
        self.w_first = np.searchsorted(self.w_owner, np.arange(len(rows) + 1))  # rows' slices of the w_ arrays
        self.w_period = self.period[self.w_owner]
        self._dev_profile: Optional[np.ndarray] = None

    # ---- which profile ------------------------------------------------------------------
    def profile_of(self, device: int) -> int:
        return int(self.perm[device % len(self.perm)])

    def device_profiles(self) -> np.ndarray:
        """Every device's row (computed on first use: 8 bytes a device)."""
        if self._dev_profile is None:
            self._dev_profile = self.perm[np.arange(self.num_devices) % len(self.perm)]
        return self._dev_profile

    # ---- speed and transfers ------------------------------------------------------------
    def compute_time(self, device: int, n_samples: int) -> float:
        """Seconds of one epoch over ``n_samples`` samples."""
        return n_samples * float(self.sec_per_sample[self.profile_of(device)]) * self.compute_scale

    def download_time(self, device: int) -> float:
        return self.model_bytes / float(self.down[self.profile_of(device)])

    def upload_time(self, device: int) -> float:
        return self.upload_bytes / float(self.up[self.profile_of(device)])

    # ---- one device's availability ------------------------------------------------------
    def _cycles(self, period: float, t: float) -> list:
        """The cycles whose windows may hold t (floor rounding either way is covered)."""
        if period == 0.0:
            return [0.0]
        k0 = math.floor(t / period)
        return [float(k) for k in (k0 - 1, k0, k0 + 1, k0 + 2) if k >= -1]

    def _bounds(self, p: int, k: float):
        sl = slice(self.w_first[p], self.w_first[p + 1])
        base = np.float64(k) * self.period[p]
        return base + self.w_on[sl], base + self.w_off[sl]

    def _window(self, device: int, t: float) -> Optional[float]:
        """The end of the window holding t (inf: always), or None when offline at t."""
        p = self.profile_of(device)
        if self.always[p]:
            return math.inf
        for k in self._cycles(float(self.period[p]), t):
            a, b = self._bounds(p, k)
            i = int(np.searchsorted(a, t, side="right")) - 1
            if i >= 0 and t < b[i]:
                return float(b[i])
        return None

    def is_available(self, device: int, t: float) -> bool:
        return self._window(device, t) is not None

    def window_end(self, device: int, t: float) -> float:
        """When the window holding t closes (the device goes offline); inf for ``always``."""
        end = self._window(device, t)
        if end is None:
            raise ValueError(f"device {device} is offline at t={t}")
        return end

    def next_online(self, device: int, t: float) -> float:
        """The first time >= t at which the device is online (t itself if it is); inf if never again."""
        if self.is_available(device, t):
            return t
        p = self.profile_of(device)
        best = math.inf
        for k in self._cycles(float(self.period[p]), t):
            a, _ = self._bounds(p, k)
            later = a[a >= t]
            if len(later):
                best = min(best, float(later[0]))
        return best

    # ---- every device at once -----------------------------------------------------------
    def _cycle_bounds(self, t: float):
        """(window index, start, end) for each window in each cycle that may hold or follow t."""
        per = self.w_period
        k0 = np.where(per > 0, np.floor(t / np.where(per > 0, per, 1.0)), 0.0)
        for dk in (-1.0, 0.0, 1.0, 2.0):
            k = k0 + dk
            ok = (per > 0) & (k >= -1) if dk else np.ones(len(per), dtype=bool)
            idx = np.flatnonzero(ok)
            base = k[idx] * per[idx]
            yield idx, base + self.w_on[idx], base + self.w_off[idx]

    def profiles_online(self, t: float) -> np.ndarray:
        """Per profile row: online at t."""
        online = self.always.copy()
        for idx, a, b in self._cycle_bounds(t):
            online[self.w_owner[idx[(a <= t) & (t < b)]]] = True
        return online

    def profiles_next_online(self, t: float) -> np.ndarray:
        """Per profile row: the first time >= t it is online (inf: never again)."""
        nxt = np.full(len(self.perm), math.inf)
        online = self.profiles_online(t)
        nxt[online] = t
        for idx, a, _ in self._cycle_bounds(t):
            later = a >= t
            np.minimum.at(nxt, self.w_owner[idx[later]], a[later])
        return nxt

    def eligible(self, t: float, busy: np.ndarray) -> np.ndarray:
        """Sorted ids of the devices online at t and not in ``busy`` (a bool mask over devices)."""
        return np.flatnonzero(self.profiles_online(t)[self.device_profiles()] & ~busy)

    def next_wake(self, t: float, busy: np.ndarray) -> tuple[float, np.ndarray]:
        """The first time >= t at which a device not in ``busy`` is online, and the devices online then
        (sorted); (inf, empty) when none ever will be."""
        nxt = self.profiles_next_online(t)[self.device_profiles()]
        nxt[busy] = math.inf
        first = float(nxt.min()) if len(nxt) else math.inf
        return first, (np.flatnonzero(nxt == first) if math.isfinite(first) else np.zeros(0, dtype=np.int64))

    # ---- by residue: device k has row perm[k mod P], so a refill needs O(P), not O(N) ---------
    def residue_online(self, t: float) -> np.ndarray:
        """Per residue r in [0, P): whether devices k ≡ r (mod P) are online at t."""
        return self.profiles_online(t)[self.perm]

    def residue_next_online(self, t: float) -> np.ndarray:
        """Per residue r in [0, P): the first time >= t devices k ≡ r (mod P) are online (inf: never again)."""
        return self.profiles_next_online(t)[self.perm]

    def longest_windows(self) -> np.ndarray:
        """Per profile row: the longest time online in one stretch (inf: always)."""
        longest = np.where(self.always, math.inf, 0.0)
        np.maximum.at(longest, self.w_owner, self.w_off - self.w_on)
        return longest
