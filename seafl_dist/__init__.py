"""seafl_dist: semi-asynchronous federated learning (SEAFL, SEAFL², FedBuff, FedAsync, FedAvg)
on a deterministic virtual clock, in one process or across torch.distributed ranks.

    seafl run configs/quickstart.yaml            # one process
    torchrun --nproc_per_node=3 -m seafl_dist run configs/quickstart.yaml
"""
__version__ = "0.1.0"
