"""The scheduler's idle-online index (sim/churn.py ``Idle``, ``ChurnLoop._next_wake``) answers exactly what
the whole-population scans (``Population.eligible`` / ``next_wake``) answer, in O(P + M) instead of O(N)."""
import math
import random

import numpy as np
import pytest

from seafl_dist.sim.churn import AlwaysOnline, ChurnLoop, Idle
from seafl_dist.sim.population import Population
from seafl_dist.sim.profiles import read_profiles
from test_churn_random import random_profile


class _Sched:  # what ChurnLoop._next_wake reads of its scheduler
    def __init__(self, n, availability):
        self.num_devices, self.availability, self.concurrency = n, availability, 1

    @staticmethod
    def unavailable(busy):  # no participation cap: only the devices in flight
        return busy


@pytest.mark.parametrize("trial", range(20))
def test_idle_index_equals_the_full_scan(tmp_path, trial):
    r = random.Random(trial)
    path = tmp_path / "p.csv"
    path.write_text(random_profile(r))
    n = r.randint(1, 400)
    pop = Population(read_profiles(path), n, trial, availability_scale=r.choice([0.5, 1.0, 3.0]))
    loop = ChurnLoop(_Sched(n, pop))
    for _ in range(15):
        t = r.uniform(0, 300)
        busy_ids = sorted(r.sample(range(n), r.randint(0, min(n, 40))))
        busy = np.zeros(n, dtype=bool)
        busy[busy_ids] = True
        want = pop.eligible(t, busy)
        idle = Idle(pop.residue_online(t), n, busy_ids)
        assert idle.count == len(want)
        assert idle.take(np.arange(idle.count)).tolist() == want.tolist()
        loop.in_flight = {i: type("J", (), {"device": d})() for i, d in enumerate(busy_ids)}
        wake, _ = pop.next_wake(t, busy)
        assert loop._next_wake(t) == wake or (math.isinf(wake) and math.isinf(loop._next_wake(t)))


def test_always_online_index():
    idle = Idle(AlwaysOnline(10).residue_online(0.0), 10, [7, 2, 3])
    assert idle.count == 7 and idle.take(np.arange(7)).tolist() == [0, 1, 4, 5, 6, 8, 9]
    assert Idle(np.array([False, True]), 5, [1]).take(np.arange(1)).tolist() == [3]
