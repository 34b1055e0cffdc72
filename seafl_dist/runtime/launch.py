"""Pick the runner from the environment: torchrun (WORLD_SIZE > 1) or this process alone.

Rank and world size are read here, once, and passed down.
"""
from __future__ import annotations

import os
import sys

from seafl_dist.runtime.server import format_summary


def launch(cfg, out_dir, *, resume=None) -> int:
    """Run ``cfg`` into ``out_dir``; ``resume``: the checkpoint to continue from (rank 0 reads it)."""
    from seafl_dist.runtime import signals
    signals.install()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        from seafl_dist.runtime.distributed import run_distributed
        return run_distributed(cfg, out_dir, rank=int(os.environ["RANK"]), world_size=world,
                               local_rank=int(os.environ.get("LOCAL_RANK", "0")), resume=resume)
    from seafl_dist.runtime.inprocess import run_inprocess
    use_threads(cfg)
    print(f"seafl: running {cfg.name} ({cfg.algorithm.name}) in one process; output in {out_dir}", file=sys.stderr)
    summary = run_inprocess(cfg, out_dir, resume=resume)
    print(format_summary(summary))
    return 0


def use_threads(cfg) -> None:
    """One process: ``runtime.threads`` torch threads, with a warning when they outnumber the CPUs."""
    if cfg.runtime.threads:
        import torch

        from seafl_dist.runtime.setup import cpus_here, oversubscription
        torch.set_num_threads(cfg.runtime.threads)
        warning = oversubscription(cfg.runtime.threads, 1, cpus_here())
        if warning and (cfg.runtime.device == "cpu" or not torch.cuda.is_available()):
            print(warning, file=sys.stderr)
