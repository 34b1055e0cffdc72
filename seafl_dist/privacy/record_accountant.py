"""Each device's record-level ε under ``train.dp_sgd``: Opacus's accountant over the DP-SGD steps of its jobs.

A job of device k takes T_j Poisson-sampled DP-SGD steps at rate q_k = min(1, B / n_k) with noise multiplier σ
(train/dp_sgd.py ``job_steps``, handed to the ledger: from the schedule alone). What the server sees of it is its upload, so a job is
charged when its upload arrives, i.e. when an aggregate event holds it (rejected or not: the server saw it):

- every job an aggregation takes, at its steps: a SEAFL² job notified early at the epochs it trained (the update's
  ``epochs``), a FedCompass job at its ``steps``;
- never a job whose upload does not arrive: dropped (device churn), in flight when the run ended (or stopped at its
  target), or finished into a buffer no aggregation emptied (the server never dispatches such a job: it is not
  trained at all, runtime/server.py ``_dispatch``).

All of a device's jobs share one (q_k, σ), so its ε is one composition of T_k = Σ_j T_j steps: ``RDPAccountant`` or
``PRVAccountant`` of Opacus (``train.dp_sgd.accountant``), at ``privacy.delta``, with the history
``[(σ, q_k, T_k)]`` that Opacus's own ``step()`` builds from T_k calls (it merges repeated (σ, q) into one entry).
:func:`epsilon` is computed once per distinct (accountant, σ, q, T, δ) and cached; under RDP the per-step RDP
vector is cached per (σ, q) too, and multiplied by T (Opacus's ``compute_rdp`` returns exactly that product), so a
run of 10^4 devices costs one RDP vector per distinct shard size (at most √(2·|D|) of them for disjoint shards),
not per device.
A device with no arrived job has ε = 0; σ = 0 is ε = ∞.

``train.dp_sgd.target_epsilon``: the schedule does not depend on the model, so before the run every device's
(q_k, T_k) over the whole schedule is known (:func:`schedule_pairs`), and :func:`calibrate` finds by bisection the
smallest σ whose largest ε_k is at most the target, over the pairs no other dominates (:func:`frontier`: a larger
q and more steps), since q_k varies and the device with the most steps need not be the one that binds;
:func:`calibrated_noise` is that calibration for a prepared run (the one line it prints, a target no σ reaches
refused in one line).

This module owns that ledger (:class:`RecordLedger`: device → steps charged, append-only so a snapshot is a
length), its checkpoint state (the totals; a resume continues them exactly), and summary.json's
``dp_sgd.epsilon`` (each device's ε, the largest, the quantiles). Opacus is imported here only when ε is asked for,
and only with ``train.dp_sgd.enabled`` (:func:`ledger_of` gives :class:`NoLedger` otherwise).
"""
from __future__ import annotations

import functools
import math
import sys
import warnings
from collections import Counter

from seafl_dist.settings import ConfigError

from seafl_dist.settings.dp_sgd import ACCOUNTANTS  # one list: the settings own it
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def sample_rate(n: int, batch_size: int) -> float:
    """q_k = min(1, B / n_k), as train/dp_sgd.py ``job_steps`` and the Poisson plan draw it."""
    return min(1.0, batch_size / max(int(n), 1))


@functools.lru_cache(maxsize=None)
def _rdp_per_step(noise_multiplier: float, q: float):
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as analysis
    return analysis.compute_rdp(q=q, noise_multiplier=noise_multiplier, steps=1, orders=RDPAccountant.DEFAULT_ALPHAS)


@functools.lru_cache(maxsize=1 << 16)
def epsilon(accountant: str, noise_multiplier: float, q: float, steps: int, delta: float) -> float:
    """ε at ``delta`` of ``steps`` Poisson-subsampled Gaussian steps at rate ``q`` and multiplier
    ``noise_multiplier``, by Opacus's ``accountant`` (``rdp``: its default orders; ``prv``: its default
    eps_error 0.01, the upper bound): 0 for no step, ∞ for σ = 0."""
    if steps < 0 or not 0 < delta < 1 or not 0 < q <= 1 or not noise_multiplier >= 0:
        raise ValueError(f"epsilon needs steps >= 0, delta in (0, 1), q in (0, 1], σ >= 0: got {steps}, {delta}, "
                         f"{q}, {noise_multiplier}")
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    with warnings.catch_warnings():  # "Optimal order is the largest alpha": a looser bound, still a bound
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # PRV at q = 1: log(0) inside np.where, not taken
        if accountant == "rdp":
            from opacus.accountants import RDPAccountant
            from opacus.accountants.analysis import rdp as analysis
            eps, _ = analysis.get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS,
                                                rdp=_rdp_per_step(float(noise_multiplier), float(q)) * int(steps),
                                                delta=delta)
            return float(eps)
        if accountant == "prv":
            from opacus.accountants import PRVAccountant
            acc = PRVAccountant()
            acc.history = [(float(noise_multiplier), float(q), int(steps))]
            return float(acc.get_epsilon(delta))
    raise ValueError(f"unknown accountant {accountant!r}; allowed: {', '.join(ACCOUNTANTS)}")


def quantile(values: list[float], p: float) -> float:
    """numpy's linear-interpolation quantile of ``values`` (sorted here), as report/participation.py's quartiles."""
    import numpy as np
    return float(np.quantile(np.asarray(values, dtype=float), p))


class NoLedger:
    """No DP-SGD: nothing charged, nothing in summary.json or the checkpoint."""

    active = False

    def on_aggregate(self, ev: dict) -> None:
        return None

    def on_eval(self, row: dict) -> None:
        return None

    def close(self, summary: dict) -> None:
        return None

    def mark(self) -> None:
        return None

    def state(self, mark=None) -> None:
        return None

    def load(self, state) -> None:
        return None

    def summary(self) -> dict:
        return {}


class RecordLedger(NoLedger):
    """Device → DP-SGD steps of its arrived jobs (module doc); a server callback (``on_aggregate``)."""

    active = True

    def __init__(self, dp, *, batch_size: int, n_samples: list[int], delta: float, steps_of):
        self.dp, self.batch_size, self.delta, self.steps_of = dp, int(batch_size), float(delta), steps_of
        self.n_samples = [int(n) for n in n_samples]
        self.charged: list[tuple[int, int]] = []  # (device, steps), one per arrived job (or device, after a load)

    def on_aggregate(self, ev: dict) -> None:
        for u in ev["updates"]:
            s = self.steps_of(int(u["n_samples"]), self.batch_size, int(u["epochs"]), self.dp.noise_multiplier,
                              u.get("steps") or None)
            self.charged.append((int(u["device"]), s.steps))

    def mark(self) -> int:
        """The ledger's length now: a snapshot (the end of an aggregation) without a copy."""
        return len(self.charged)

    def totals(self, mark: int | None = None) -> Counter:
        out: Counter = Counter()
        for device, steps in self.charged[:mark]:
            out[device] += steps
        return out

    def state(self, mark: int | None = None) -> dict:
        """The checkpoint's ``dp_sgd_steps``: each charged device's total steps (up to ``mark``)."""
        return {"steps": {int(d): int(s) for d, s in sorted(self.totals(mark).items())}}

    def load(self, state: dict | None) -> None:
        if state is None:
            raise ValueError("the checkpoint has no DP-SGD step ledger, and this run has train.dp_sgd.enabled: true")
        self.charged = [(int(d), int(s)) for d, s in state["steps"].items()]

    def epsilons(self) -> list[float]:
        """ε_k of every device 0..N−1 (0 for a device with no arrived job)."""
        totals, dp = self.totals(), self.dp
        return [epsilon(dp.accountant, float(dp.noise_multiplier), sample_rate(n, self.batch_size), totals[k],
                        self.delta) if totals[k] else 0.0 for k, n in enumerate(self.n_samples)]  # a Counter: 0

    def summary(self) -> dict:
        """summary.json's ``dp_sgd.epsilon``: the accountant, δ, the largest ε_k, its quantiles over the devices,
        the devices charged, and ε_k and T_k of every device (lists indexed by device)."""
        eps, totals = self.epsilons(), self.totals()
        return {"accountant": self.dp.accountant, "delta": self.delta, "max": max(eps, default=0.0),
                "quantiles": {f"p{round(p * 100)}": quantile(eps, p) for p in QUANTILES} if eps else {},
                "devices_charged": sum(1 for k in range(len(self.n_samples)) if totals[k]),
                "by_device": eps, "steps_by_device": [int(totals[k]) for k in range(len(self.n_samples))]}


def frontier(pairs) -> list[tuple[float, int]]:
    """The (q, T) pairs no other pair dominates (another with q' >= q and T' >= T has an ε at least as large, for any
    σ: ε grows with both): the only devices that can hold the largest ε. Sorted by q, T falling."""
    best: list[tuple[float, int]] = []
    for q, t in sorted({(float(q), int(t)) for q, t in pairs if int(t) > 0}, key=lambda p: (-p[0], -p[1])):
        if not best or t > best[-1][1]:
            best.append((q, t))
    return sorted(best)


def largest(accountant: str, noise_multiplier: float, pairs, delta: float) -> float:
    """max over ``pairs`` (q_k, T_k) of ε_k at ``noise_multiplier``: every pair of :func:`frontier`, none left out."""
    return max((epsilon(accountant, noise_multiplier, q, t, delta) for q, t in frontier(pairs)), default=0.0)


def calibrate(target: float, pairs, delta: float, accountant: str = "rdp", rtol: float = 1e-6) -> float:
    """The smallest σ (to ``rtol`` relative, rounded up) whose largest ε over ``pairs`` (q_k, T_k) is at most
    ``target`` at ``delta``: bisection on σ (ε falls as σ grows), the bracket doubled from σ = 1 or halved to it.
    Not the device with the most steps alone: a device of a smaller shard (larger q) may bind first."""
    pairs = sorted({(float(q), int(t)) for q, t in pairs if int(t) > 0})
    front = frontier(pairs)
    if not front:
        raise ValueError("no device takes a DP-SGD step that arrives in this schedule: there is no ε to calibrate")
    if not target > 0:
        raise ValueError(f"the target ε must be > 0: got {target}")

    sigma = _bisect(lambda z: max(epsilon(accountant, z, q, t, delta) for q, t in front) <= target, rtol)
    # RDP's bound grows with q and T, so the frontier is every pair's bound; PRV's grid may not be monotone: it is
    # checked over every pair, and bisected over all of them if one is above the target
    if accountant == "rdp" or max(epsilon(accountant, sigma, q, t, delta) for q, t in pairs) <= target:
        return sigma
    return _bisect(lambda z: max(epsilon(accountant, z, q, t, delta) for q, t in pairs) <= target, rtol)


def _bisect(ok, rtol: float) -> float:
    """The smallest σ with ``ok(σ)`` (ok false below it, true above), to ``rtol`` relative, from above."""
    hi = 1.0
    while not ok(hi):
        hi *= 2.0
        if hi > 2.0 ** 40:
            raise ValueError("no σ up to 2^40 reaches the target ε")
    lo = hi / 2.0
    while ok(lo):
        hi, lo = lo, lo / 2.0
        if lo < 2.0 ** -40:
            return hi
    while (hi - lo) > rtol * hi:
        mid = (lo + hi) / 2.0
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def schedule_pairs(events, n_samples: list[int], batch_size: int, steps_of) -> list[tuple[float, int]]:
    """(q_k, T_k) of every device with an arrived job over the whole schedule ``events`` (the aggregate events'
    updates, as :class:`RecordLedger` charges them): what :func:`calibrate` bounds. σ plays no part in it."""
    led = RecordLedger(_Sigma(), batch_size=batch_size, n_samples=n_samples, delta=0.5, steps_of=steps_of)
    for ev in events:
        if ev["event"] == "aggregate":
            led.on_aggregate(ev)
    return [(sample_rate(n_samples[k], batch_size), t) for k, t in sorted(led.totals().items()) if t]


def delta_warning(n_samples: list[int], delta: float) -> str | None:
    """One warning line where δ is not below 1/n_k for the largest shard n_k: record-level (ε, δ)-DP with δ ≥ 1/n
    allows releasing a record of n outright (the usual rule is δ ≪ 1/n), so the devices' ε says little; None else."""
    n = max(n_samples, default=0)
    if n and delta >= 1.0 / n:
        return (f"seafl: warning: privacy.delta={delta:g} is not below 1/n_k = {1.0 / n:.3g} for the largest shard "
                f"(n_k = {n}): record-level (ε, δ) at δ >= 1/n_k allows a record to leak outright; lower "
                f"privacy.delta below {1.0 / n:.3g}")
    return None


def calibrated_noise(exp, steps_of, *, say: bool = True) -> float | None:
    """Under ``train.dp_sgd.target_epsilon``: the σ whose largest device ε over the whole schedule is at most the
    target. ``exp``: an Experiment (runtime/setup.py ``prepare``), its schedule replayed here, on every rank alike (the
    clock does not read the model); ``steps_of``: train/dp_sgd.py ``job_steps``. One line says it (``say``: rank 0).
    None without a target."""
    cfg = exp.cfg
    dp = cfg.train.dp_sgd
    if dp.target_epsilon is None:
        return None
    pairs = schedule_pairs(exp.schedule(), exp.n_samples, cfg.train.batch_size, steps_of)
    try:
        sigma = calibrate(dp.target_epsilon, pairs, cfg.privacy.delta, dp.accountant)
    except ValueError as err:
        raise ConfigError(f"config key 'train.dp_sgd.target_epsilon' has value {dp.target_epsilon!r}; allowed: a "
                          f"target this schedule can reach ({err}); give train.dp_sgd.noise_multiplier instead") from None
    if say:
        print(f"seafl: train.dp_sgd: σ {sigma:.6g} calibrated so that every device's ε <= {dp.target_epsilon:g} at δ "
              f"{cfg.privacy.delta:g} ({dp.accountant}) over the whole schedule ({len(pairs)} devices with an arrived "
              f"job)", file=sys.stderr)
    return sigma


class _Sigma:
    noise_multiplier = 0.0  # job_steps packs σ beside the steps; the count does not read it
    accountant = "rdp"


def ledger_of(exp, steps_of) -> NoLedger | RecordLedger:
    """The run's ledger: :class:`RecordLedger` under ``train.dp_sgd.enabled``, else :class:`NoLedger`. ``steps_of``
    is train/dp_sgd.py's ``job_steps`` (a job's DP steps from the schedule; given, as privacy/ imports no train/)."""
    cfg = exp.cfg
    if not cfg.train.dp_sgd.enabled:
        return NoLedger()
    return RecordLedger(exp.dp_sgd, batch_size=cfg.train.batch_size, n_samples=exp.n_samples,
                        delta=cfg.privacy.delta, steps_of=steps_of)
