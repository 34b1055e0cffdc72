"""Local training of one job and evaluation of a flat model; no torch.distributed here."""
from seafl_dist.train.flat import flatten, load_flat
from seafl_dist.train.local import evaluate, train_job

__all__ = ["evaluate", "flatten", "load_flat", "train_job"]
