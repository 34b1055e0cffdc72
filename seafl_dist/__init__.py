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
``__version__`` is the package's version, ``NUMERICS`` the version of the bits it trains
(:mod:`seafl_dist.versions`); summary.json and checkpoints record both.
"""
from seafl_dist.versions import NUMERICS, __version__  # noqa: F401  (the package's and the trained bits' versions)
from seafl_dist.api import RunFailed, RunInterrupted, SweepSignal, load_run, make_config, run, sweep

__all__ = ["NUMERICS", "RunFailed", "RunInterrupted", "SweepSignal", "load_run", "make_config", "run", "sweep"]
