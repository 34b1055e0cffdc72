"""Scheduler and trace checker agree on random populations (windows, periods, idle, dropout, β, SEAFL²).

The checker states the rules independently of the scheduler's loop (slots owed, refills, waits,
drops at windows' closes or inside spans, blocking), so a disagreement is a bug in one of them."""
import random

import pytest

from seafl_dist.report.trace import check_trace
from seafl_dist.settings import ClockConfig, IdleConfig
from seafl_dist.sim import Scheduler, SpeedModel
from seafl_dist.sim.clock import ProfiledSpeed
from seafl_dist.sim.population import Population
from seafl_dist.sim.profiles import read_profiles

HEADER = "id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows\n"


def random_profile(r: random.Random) -> str:
    rows = []
    for i in range(r.randint(1, 6)):
        kind, period = r.random(), ""
        if kind < 0.2:
            windows = "always"
        elif kind < 0.3:
            windows = "never"
        else:
            period = r.choice(["", str(r.randint(20, 100))])
            points = sorted(r.sample(range(0, int(period or 300) + 1), 2 * r.randint(1, 3)))
            windows = " ".join(f"{a}:{b}" for a, b in zip(points[::2], points[1::2]))
        rows.append(f"p{i},{r.choice([0.01, 0.02, 0.05])},{r.choice(['inf', 1000, 4000])},"
                    f"{r.choice(['inf', 1000, 2000])},{period},{windows}\n")
    return HEADER + "".join(rows)


@pytest.mark.parametrize("trial", range(30))
def test_random_schedules_pass_the_checker(tmp_path, trial):
    r = random.Random(trial)
    (tmp_path / "p.csv").write_text(random_profile(r))
    n = r.randint(2, 12)
    m = r.randint(1, n)
    beta, partial = r.choice([None, 0, 1, 2, 5]), r.random() < 0.5
    k = m if beta == 0 else r.randint(1, m)
    epochs, ns = r.randint(1, 4), [r.randint(20, 200) for _ in range(n)]
    pop = Population(read_profiles(tmp_path / "p.csv"), n, trial, availability_scale=r.choice([0.5, 1, 2]),
                     model_bytes=r.choice([0, 2000]))
    idle = None
    if r.random() < 0.3:
        idle = SpeedModel(ClockConfig(idle=IdleConfig(distribution="pareto", max=5, resample="per_epoch")), ns,
                          trial, epochs)
    speed = ProfiledSpeed(pop, ns, epochs, idle)
    with_pop = r.random() < 0.8
    dropout = r.choice([None, 0.0, 0.2, 0.5]) if with_pop else r.choice([0.0, 0.3])
    kw = dict(num_devices=n, concurrency=m, buffer_size=k, staleness_limit=beta, partial=partial, seed=trial,
              n_samples=ns, max_aggregations=r.choice([5, 30]), max_time=r.choice([None, 500.0]), plan=speed.plan,
              dropout=dropout)
    if with_pop:
        kw.update(comm=speed.comm, availability=pop, stall_reason=speed.stall_reason())
    events = list(Scheduler(**kw).events())
    problems = check_trace(events, concurrency=m, buffer_size=k, staleness_limit=beta, partial=partial,
                           schedule_only=True, num_devices=n, population=pop if with_pop else None, dropout=dropout,
                           epochs=epochs)
    assert not problems, "\n".join(problems[:5])
