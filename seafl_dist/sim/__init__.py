"""Virtual clock and scheduler: pure, no torch, no torch.distributed."""
from seafl_dist.sim.clock import SpeedModel, draw_idle
from seafl_dist.sim.rng import stream, stream_seed
from seafl_dist.sim.scheduler import Job, Lookahead, Scheduler

__all__ = ["Job", "Lookahead", "Scheduler", "SpeedModel", "draw_idle", "stream", "stream_seed"]
