"""Local training of one job and evaluation of a flat model; no torch.distributed here."""
from seafl_dist.train.flat import FlatLayout, flatten, load_flat
from seafl_dist.train.local import evaluate, train_job

__all__ = ["FlatLayout", "evaluate", "flatten", "load_flat", "train_job"]
