"""seafl_dist: semi-asynchronous federated learning (SEAFL, SEAFL², FedBuff, FedAsync, FedAvg)
on a deterministic virtual clock, in one process or across torch.distributed ranks.

    seafl run quickstart                          # a packaged config, by name (`seafl configs`)
    torchrun --nproc_per_node=3 -m seafl_dist run configs/quickstart.yaml

    import seafl_dist
    summary = seafl_dist.run("quickstart", algorithm__name="fedbuff", out="runs/fb")
    r = seafl_dist.load_run("runs/fb")            # config, metrics, events, summary
    seafl_dist.sweep("quickstart", grid={"algorithm.name": ["seafl", "fedbuff"]}, seeds=[0, 1])

(:mod:`seafl_dist.api`; importing the package does not import torch.) ``run`` raises
:class:`RunInterrupted` (a KeyboardInterrupt) after a checkpoint on SIGTERM/SIGINT/SIGUSR1 and
:class:`RunFailed` when the run fails; ``sweep`` raises :class:`SweepSignal` on those signals.
"""
from seafl_dist.api import RunFailed, RunInterrupted, SweepSignal, load_run, make_config, run, sweep

__version__ = "0.1.0"
__all__ = ["RunFailed", "RunInterrupted", "SweepSignal", "load_run", "make_config", "run", "sweep"]
