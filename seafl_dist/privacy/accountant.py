"""ε at δ for a device included m times: the composition of m Gaussian mechanisms, each with multiplier z.

Each aggregation that includes device k releases w′ + N(0, (z·S)² I) with S bounding what k's updates can move w′
(privacy/sensitivity.py), so for k it is ``GaussianDpEvent(z)``; k's loss over the run is
``SelfComposedDpEvent(GaussianDpEvent(z), m_k)``, composed adaptively. No amplification by sampling is claimed: a
device takes part because it is fast and online, not because a random sample drew it. The run's ε is the
largest over devices. ``dp-accounting`` computes it (PLD by default, RDP on request), never code of this
project, once per distinct m; it is imported here only, when ε is first asked for, so a run without privacy
never imports it (``pip install seafl-dist[privacy]`` installs it). :func:`composed_epsilon` composes several runs
on the same data (``seafl report``, report/epsilon.py): ε adds up over runs; it is never averaged.
"""
from __future__ import annotations

import functools
import math
from typing import Iterable

ACCOUNTANTS = ("pld", "rdp")


PLD_GRID = 1e-4  # dp-accounting's default value_discretization_interval, kept up to ε = PLD_GRID_UP_TO
PLD_GRID_UP_TO = 50.0


def pld_grid(rough_epsilon: float) -> float:
    """The PLD's value discretization for an ε about ``rough_epsilon``: dp-accounting's 1e-4 up to ε = 50, then
    1e-4 · ε/50. Its points grow with ε/grid: at z = 0.01 (ε ≈ 5,400) the default grid took 4 minutes and 24 GiB
    for one composition, and the kernel killed the run. Coarser, the PLD stays a valid upper bound (dp-accounting
    rounds the privacy loss up, ``pessimistic_estimate``), within ~1e-4 relative of the fine one."""
    return PLD_GRID * max(1.0, rough_epsilon / PLD_GRID_UP_TO)


def _accountant(kind: str, grid: float = PLD_GRID):
    import dp_accounting  # lazy: only a run with privacy, or a test, pays for it
    # S is already the whole shift replace-one can cause (2C·Σc, privacy/sensitivity.py), so the event is a
    # Gaussian whose neighbouring means lie σ/z apart: dp-accounting's GaussianDpEvent under ADD_OR_REMOVE_ONE.
    # Its REPLACE_ONE would read z against the norm of one record and double the shift a second time (PLD; its
    # RDP ignores the relation for a Gaussian).
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind == "pld":
        return dp_accounting.pld.PLDAccountant(neighboring_relation=relation, value_discretization_interval=grid)
    if kind == "rdp":
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    raise ValueError(f"unknown accountant {kind!r}; allowed: {', '.join(ACCOUNTANTS)}")


@functools.lru_cache(maxsize=4096)
def epsilon(noise_multiplier: float, count: int, delta: float, accountant: str = "pld") -> float:
    """ε at ``delta`` of ``count`` compositions of the Gaussian mechanism with ``noise_multiplier``: 0 for no
    inclusion, ∞ for z = 0 (no noise)."""
    if count < 0 or not 0 < delta < 1 or not noise_multiplier >= 0:
        raise ValueError(f"epsilon needs count >= 0, delta in (0, 1), z >= 0: got {count}, {delta}, "
                         f"{noise_multiplier}")
    if count == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    import dp_accounting
    return _epsilon_of(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(noise_multiplier), count),
                       delta, accountant)


def _epsilon_of(event, delta: float, accountant: str) -> float:
    """ε at ``delta`` of the DpEvent ``event`` by ``accountant``."""
    grid = PLD_GRID
    if accountant == "pld":  # RDP's ε (milliseconds, an upper bound on the PLD's) sizes the PLD's grid
        rough = _accountant("rdp")
        rough.compose(event)
        grid = pld_grid(float(rough.get_epsilon(delta)))
    acc = _accountant(accountant, grid)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def run_epsilon(noise_multiplier: float, inclusions: Iterable[int], delta: float, accountant: str = "pld") -> float:
    """The run's ε: the largest over devices of each one's ε for its number of inclusions m_k (one computation
    per distinct m)."""
    return max((epsilon(noise_multiplier, int(m), delta, accountant) for m in set(inclusions)), default=0.0)


def composed_epsilon(runs: Iterable[tuple[float, int]], delta: float, accountant: str = "pld") -> float:
    """ε at ``delta`` of several runs on the same data, composed: each run ``(z, m)`` is
    ``SelfComposedDpEvent(GaussianDpEvent(z), m)`` for its most-included device (m its ``max_inclusions``), and
    the runs are one ``ComposedDpEvent``. A device included m′ ≤ m times in a run loses at most what m inclusions
    lose (ε grows with m), so this bounds every device's ε over the runs, whichever device it was in each. Never a
    mean: k runs of ε each spend more than ε. 0 for no inclusion; ∞ when a run added no noise (z = 0)."""
    pairs = tuple(sorted((float(z), int(m)) for z, m in runs if int(m) > 0))
    if not 0 < delta < 1 or any(not z >= 0 for z, _ in pairs):
        raise ValueError(f"composed_epsilon needs delta in (0, 1) and every z >= 0: got {delta}, {pairs}")
    if not pairs:
        return 0.0
    if any(z == 0 for z, _ in pairs):
        return math.inf
    if len(pairs) == 1:
        return epsilon(*pairs[0], delta, accountant)
    return _composed(pairs, float(delta), accountant)


@functools.lru_cache(maxsize=256)
def _composed(pairs: tuple, delta: float, accountant: str) -> float:
    import dp_accounting
    return _epsilon_of(dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), m) for z, m in pairs]), delta, accountant)


def calibrate(target_epsilon: float, count: int, delta: float, accountant: str = "pld") -> float:
    """The smallest z (within 1e-6 relative) whose ``count`` compositions have ε ≤ ``target_epsilon`` at ``delta``:
    ``dp_accounting.calibrate_dp_mechanism`` over the same event :func:`epsilon` accounts. The search is bracketed
    by RDP's z (an upper bound on the PLD's, found in milliseconds), because PLD accounting at small z is slow."""
    if not target_epsilon > 0 or count < 1 or not 0 < delta < 1:
        raise ValueError(f"calibration needs target ε > 0, count >= 1, delta in (0, 1): got {target_epsilon}, "
                         f"{count}, {delta}")
    import dp_accounting
    from dp_accounting import mechanism_calibration as mc

    def event(z):
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), count)

    upper = dp_accounting.calibrate_dp_mechanism(lambda: _accountant("rdp"), event, target_epsilon, delta,
                                                 bracket_interval=mc.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-9)
    z = upper
    if accountant != "rdp":
        def fresh():
            return _accountant(accountant, pld_grid(target_epsilon))

        try:  # PLD's z is RDP's times ~0.9 in practice: start from half of it
            bracket = mc.ExplicitBracketInterval(upper / 2, upper * 1.01)
            z = dp_accounting.calibrate_dp_mechanism(fresh, event, target_epsilon, delta, bracket_interval=bracket,
                                                     tol=1e-6 * upper)
        except ValueError:  # no sign change within it: search from near 0 (slow, never seen)
            z = dp_accounting.calibrate_dp_mechanism(fresh, event, target_epsilon, delta,
                                                     bracket_interval=mc.LowerEndpointAndGuess(1e-3, upper),
                                                     tol=1e-6 * upper)
    step = 1e-6
    while epsilon(z, count, delta, accountant) > target_epsilon:  # Brent's answer is within tol, on either side,
        z *= 1 + step  # and epsilon's grid (sized by RDP at z) may be coarser than the search's above ε = 50
        step *= 2
    return float(z)
