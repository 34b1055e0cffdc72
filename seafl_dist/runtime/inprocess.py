"""The in-process runner: one process simulates every device (laptop, CI, W = 1)."""
from __future__ import annotations

from seafl_dist.privacy.device_key import device_key_for
from seafl_dist.report.wandb_sink import make_callbacks
from seafl_dist.runtime.ca2fl_cache import check_cache
from seafl_dist.runtime.executor import InProcessExecutor
from seafl_dist.runtime.faults import NO_FAULT
from seafl_dist.runtime.residuals import check_disk
from seafl_dist.runtime.rundir import private_dir
from seafl_dist.runtime.server import Server
from seafl_dist.runtime.setup import prepare


def run_inprocess(cfg, out_dir, *, callbacks=(), resume=None, hook=NO_FAULT) -> dict:
    """Run (or, from checkpoint ``resume``, continue) ``cfg`` into ``out_dir``; returns the summary.
    ``hook``: the runner's test hook (runtime/faults.py)."""
    exp = prepare(cfg)
    check_disk(cfg, exp, out_dir)  # error feedback's residual checkpoints
    check_cache(cfg, exp, out_dir)  # CA²FL's cache, in memory and in the checkpoints
    callbacks = list(callbacks) + make_callbacks(cfg, out_dir, resume)
    exp.dp_key = device_key_for(cfg, private_dir(out_dir), resuming=resume is not None)  # DP-SGD's secret draws
    executor = InProcessExecutor(exp)
    try:
        return Server(exp, executor, out_dir, callbacks=callbacks, resume=resume, hook=hook).run()
    finally:  # a failed or interrupted run too: a thread training ahead (GPU graph slots) ends with it
        executor.close()
