"""What the scheduler needs for a device population, from plain settings (SPEC "Device populations").

The runtime's one call (runtime/setup.py, ``Experiment.schedule``; docs/devices.md):

    extra = population_settings(profile=exp.profile, dropout=cfg.devices.dropout,
                                availability_scale=cfg.devices.availability_scale,
                                compute_scale=cfg.clock.compute_scale, num_devices=N,
                                data_seed=cfg.data_seed, n_samples=n_samples, epochs=cfg.train.epochs,
                                model_bytes=4 * flat.numel(), idle=speed or None, download_s=cfg.clock.download_s)
    Scheduler(..., plan=extra.pop("plan", speed.plan), **extra)

With neither a profile nor a dropout it returns {}: the scheduler, and so every run file, stays
exactly what it was.
"""
from __future__ import annotations

from typing import Optional, Sequence

from seafl_dist.sim.clock import ProfiledSpeed, SpeedModel
from seafl_dist.sim.population import Population
from seafl_dist.sim.profiles import ProfileTable, read_profiles


def population_settings(*, profile: Optional[str | ProfileTable], dropout: Optional[float], num_devices: int, data_seed: int,
                        n_samples: Sequence[int], epochs: int, model_bytes: int, availability_scale: float = 1.0,
                        compute_scale: float = 1.0, idle: Optional[SpeedModel] = None,
                        download_s: float = 0.0, upload_bytes: Optional[int] = None) -> dict:
    """Keyword arguments for :class:`~seafl_dist.sim.scheduler.Scheduler`: ``availability``, ``plan``,
    ``comm``, ``stall_reason`` and ``profile_sha256`` (for the run dir; pop it before passing on)
    with a profile (a path, or the table read already); ``dropout`` and ``download_s`` when set. ``idle``:
    the clock's speed model when its idle times are to be added, else None. ``upload_bytes``: what an upload carries
    (``compression.codec``), when not the float32 model's ``model_bytes``."""
    out: dict = {}
    if profile:
        table = profile if isinstance(profile, ProfileTable) else read_profiles(profile)
        pop = Population(table, num_devices, data_seed, availability_scale=availability_scale,
                         compute_scale=compute_scale, model_bytes=model_bytes, upload_bytes=upload_bytes)
        speed = ProfiledSpeed(pop, n_samples, epochs, idle)
        out.update(availability=pop, plan=speed.plan, comm=speed.comm, stall_reason=speed.stall_reason(),
                   profile_sha256=table.sha256)
    if dropout is not None:
        out["dropout"] = dropout
    if out and not profile:
        out["download_s"] = download_s  # start events record the constant download time
    return out
