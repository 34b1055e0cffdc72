"""The population plot of a run with a device profile (docs/devices.md): ``population.png``.

Top: how many of the N devices are online, against virtual time (the profile's windows, scaled by
``devices.availability_scale``, at 600 instants; counted per profile row, so a million devices
cost no more than a thousand). Bottom: jobs in flight (a step up at each start, down at each
finish or drop; M dashed), drops as red ticks under it, aggregations as thin vertical lines.
Slots that wait for devices to come online show as dips below M where few devices are online.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from seafl_dist.report.plots import _save
from seafl_dist.report.sinks import read_events

POINTS = 600


def population_of(config: dict, run_dir: str | Path | None = None):
    """The run's Population from its config.yaml tree (``devices.profile`` must be readable here). N is
    ``devices.num``, or, where that is null (one device per writer or group: ``data.partition: natural``), the
    device count of the run's partition record in ``run_dir``."""
    from seafl_dist.report.partition import read_partition
    from seafl_dist.sim.population import Population
    from seafl_dist.sim.profiles import read_profiles
    dev, seed = config["devices"], config["data"].get("seed")
    num, record = dev["num"], None
    if num is None:
        record = read_partition(run_dir) if run_dir is not None else None
        if record is None:
            from seafl_dist.settings import ConfigError
            raise ConfigError(f"config key 'devices.num' has value None in {run_dir}; allowed: a number, or a run dir "
                              "with the partition.json that counts its devices")
        num = len(record["n_samples"])
    return Population(read_profiles(dev["profile"]), num, config["run"]["seed"] if seed is None else seed,
                      availability_scale=dev.get("availability_scale", 1.0))


def in_flight(events: list[dict]) -> tuple[list[float], list[int]]:
    """(times, jobs in flight just after each) from the trace's starts, finishes and drops."""
    times, counts, now = [0.0], [0], 0
    for e in events:
        step = {"start": 1, "finish": -1, "drop": -1}.get(e["event"])
        if step is not None:
            now += step
            times.append(e["time"])
            counts.append(now)
    return times, counts


def plot_population(run_dir: str | Path, config: dict, path: str | Path, *, until: float | None = None) -> Path:
    """``population.png`` of a profiled run: devices online and jobs in flight against virtual time."""
    run_dir = Path(run_dir)
    events = read_events(run_dir / "events.jsonl")
    end = max((e.get("time", 0.0) for e in events), default=0.0)
    until = end if until is None else until
    pop = population_of(config, run_dir)
    per_row = np.bincount(pop.device_profiles(), minlength=len(pop.perm))
    grid = np.linspace(0.0, max(until, 1e-9), POINTS)
    online = [int(per_row[pop.profiles_online(float(t))].sum()) for t in grid]
    fig = Figure(figsize=(11, 5.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(grid, online, color="tab:green", lw=1.2)
    top.set_ylabel(f"devices online (of {pop.num_devices})")
    top.set_ylim(0, pop.num_devices * 1.05)
    top.grid(alpha=0.3)
    top.set_title(f"device population of {run_dir.name} ({Path(config['devices']['profile']).name})")
    times, counts = in_flight(events)
    bottom.step(times, counts, where="post", color="tab:blue", lw=1.0, label="jobs in flight")
    m = config["devices"]["concurrency"]
    bottom.axhline(m, ls="--", lw=0.8, color="grey", label=f"M = {m}")
    drops = [e["time"] for e in events if e["event"] == "drop" and e["time"] <= until]
    if drops:
        bottom.plot(drops, [0] * len(drops), "|", color="tab:red", ms=10, label=f"drops ({len(drops)})")
    aggs = [e["time"] for e in events if e["event"] == "aggregate" and e["time"] <= until]
    if aggs:
        bottom.vlines(aggs, 0, m, color="black", lw=0.4, alpha=0.25 if len(aggs) < 300 else 0.1)
    bottom.set_ylim(-0.05 * m, m * 1.15)
    bottom.set_xlim(0, max(until, 1e-9))
    bottom.set_xlabel("virtual time (s)")
    bottom.set_ylabel("jobs in flight")
    bottom.legend(fontsize=7, loc="lower right")
    bottom.grid(alpha=0.3)
    return _save(fig, Path(path))
