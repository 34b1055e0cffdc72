"""CA²FL's cache, sized before anything trains (``algorithm.name: ca2fl``; the rule is seafl_dist/algo/ca2fl.py).

The rule keeps each contributing device's latest delta (float32, d entries of the flat model) and a float64 running
sum, on rank 0 with the server, and every checkpoint holds them (``rule_state``). So:

- **Memory**: D·d·4 + d·8 bytes, D the distinct devices the schedule aggregates within ``run.max_aggregations`` /
  ``run.max_time``. The schedule is pure (seafl_dist/sim/), so D is counted by walking a fresh copy of it
  (``exp.schedule()``, what the server's lookahead iterates) without training. Updates the run will reject at
  aggregation time are counted too (a bound). When ``min(N, K · run.max_aggregations)`` devices already fit the
  limit the walk is skipped: D is at most that; with neither limit set (a run stopped by ``run.target_accuracy``
  alone) D is bounded by N.
- **Disk**: the checkpoints kept (checkpoint.KEEP) plus the one being written, each holding the cache, as
  runtime/residuals.py counts error feedback's residual files.

A run whose memory exceeds ``algorithm.ca2fl.max_cache_gb``, or whose disk exceeds what is free for the run dir, is
refused in one line giving both figures (:func:`check_cache`).
"""
from __future__ import annotations

from pathlib import Path

from seafl_dist.runtime.checkpoint import KEEP
from seafl_dist.runtime.residuals import _size, free_for
from seafl_dist.settings import ConfigError


def cache_bytes(devices: int, numel: int) -> int:
    """Memory of the cache of ``devices`` devices' float32 deltas of ``numel`` entries, with its float64 sum."""
    return 4 * numel * devices + 8 * numel


def disk_bytes(devices: int, numel: int) -> int:
    """Disk the checkpoints holding the cache may take at once: KEEP kept, and one being written."""
    return (KEEP + 1) * cache_bytes(devices, numel)


def devices_aggregated(exp, bound: int | None = None) -> int:
    """D: how many distinct devices the run's schedule aggregates (walked without training), stopping once
    ``bound`` (default N) are seen."""
    n = exp.num_devices if bound is None else bound
    run = exp.cfg.run
    if run.max_aggregations is None and run.max_time is None:
        return n  # only a target stops the run: every device may contribute
    seen: set = set()
    for ev in exp.schedule():
        if ev["event"] == "aggregate":
            seen.update(u["device"] for u in ev["updates"])
            if len(seen) >= n:
                return n
    return len(seen)


def check_cache(cfg, exp, run_dir, free: int | None = None) -> None:
    """Refuse, before anything is written, a CA²FL run whose cache exceeds ``algorithm.ca2fl.max_cache_gb`` or
    whose checkpoints do not fit on the run dir's disk. ``exp``: the prepared run."""
    if cfg.algorithm.name != "ca2fl":
        return
    numel = exp.initial_flat().numel()
    limit = cfg.algorithm.ca2fl.max_cache_gb
    run_dir = Path(run_dir)
    free = free_for(run_dir, free)
    bound = exp.num_devices
    if cfg.run.max_aggregations is not None:
        bound = min(bound, cfg.algorithm.buffer_size * cfg.run.max_aggregations)
    fits = (limit is None or cache_bytes(bound, numel) <= limit * 1e9) and disk_bytes(bound, numel) <= free
    devices = bound if fits else devices_aggregated(exp, bound)
    memory, disk = cache_bytes(devices, numel), disk_bytes(devices, numel)
    over_limit = limit is not None and memory > limit * 1e9
    if not over_limit and disk <= free:
        return
    why = (f"more than the limit of {limit:g} GB" if over_limit else
           f"within the limit of {'no' if limit is None else f'{limit:g} GB'}, but its checkpoints need more disk "
           f"than the {_size(free)} free for {run_dir}")
    raise ConfigError(f"config key 'algorithm.ca2fl.max_cache_gb' has value {limit!r}: CA²FL's cache of the "
                      f"{devices:,} devices the schedule aggregates ({numel:,} entries each, float32) takes "
                      f"{_size(memory)} of memory and {_size(disk)} of disk ({KEEP} checkpoints kept and one being "
                      f"written), {why}; raise algorithm.ca2fl.max_cache_gb (null: no limit), free disk, or use fewer "
                      f"devices or a shorter run")
