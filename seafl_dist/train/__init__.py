"""Local training of one job (or a group of jobs at once) and evaluation of a flat model; no torch.distributed here."""
from seafl_dist.train.batched import fusion_blocker, train_jobs
from seafl_dist.train.flat import FlatLayout, flatten, load_flat
from seafl_dist.train.local import evaluate, train_job
from seafl_dist.train.plan import StepPlan, epoch_sizes

__all__ = ["FlatLayout", "StepPlan", "epoch_sizes", "evaluate", "flatten", "fusion_blocker", "load_flat", "train_job",
           "train_jobs"]
