"""Everything a run needs, built from the config: datasets, shards, the model factory, the clock.

Every rank calls :func:`prepare`; each piece is a pure function of (config, seed), so all
ranks agree on shards, initial weights and the schedule without talking to each other.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from seafl_dist.config import Config, ConfigError
from seafl_dist.data import label_histograms, load_dataset, partition
from seafl_dist.models import build_model
from seafl_dist.sim import Lookahead, Scheduler, SpeedModel, stream_seed
from seafl_dist.algo import FlatParts
from seafl_dist.train import FlatLayout, flatten


def pick_device(choice: str, local_rank: int = 0) -> torch.device:
    """``runtime.device``: auto = cuda:LOCAL_RANK (mod the GPU count) when CUDA is there, else cpu."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("runtime.device is 'cuda' but no CUDA GPU is visible; use runtime.device=auto or cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def oversubscription(threads: int, training_ranks: int, cpus: int) -> str | None:
    """A warning when the ranks that train on this machine ask for more torch threads than it has CPUs.

    Intra-op threads that outnumber the cores spin against each other: on 2 CPUs, 3 ranks of
    2 threads each took 536 s for the quickstart's server loop instead of 10 s."""
    if threads * training_ranks <= cpus:
        return None
    ranks = f"{training_ranks} training ranks x " if training_ranks > 1 else ""
    return (f"seafl: warning: {ranks}{threads} torch threads = {threads * training_ranks} threads on {cpus} CPUs "
            f"here; threads that outnumber the cores fight for them and can make training many times slower. "
            f"Set runtime.threads={max(1, cpus // training_ranks)}" + (" or start fewer ranks" if ranks else ""))


def cpus_here() -> int:
    """The CPUs this process may run on (a SLURM or container limit, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class Experiment:
    cfg: Config
    train: object  # ArrayDataset
    test: object | None  # ArrayDataset, loaded where evaluation happens
    shards: list  # list[np.ndarray] of train indices, one per device
    device: torch.device
    _n_samples: list | None = None  # kept by restrict(): the clock needs every device's n_k

    @property
    def n_samples(self) -> list[int]:
        return list(self._n_samples) if self._n_samples is not None else [len(s) for s in self.shards]

    def new_model(self):
        """A fresh LightningModule for this dataset (weights are overwritten from a flat vector)."""
        d, m = self.train, self.cfg.model
        return build_model(m.name, d.num_classes, d.in_channels, width=m.width, image_size=d.image_size,
                           optim=self.cfg.train)

    def flat_parts(self) -> FlatParts:
        """Which flat entries are trainable parameters, float statistics and integer counters."""
        layout = FlatLayout.of(self.new_model())
        return FlatParts(params=layout.mask("param"), stats=layout.mask("stat"), counters=layout.mask("counter"))

    def initial_flat(self) -> torch.Tensor:
        """w_0: the model initialised from the run's "init" stream, identical on every rank."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(stream_seed(self.cfg.run.seed, "init"))
            return flatten(self.new_model())

    def shard(self, device_id: int) -> torch.Tensor:
        return torch.as_tensor(self.shards[device_id], dtype=torch.long)

    def partition_report(self) -> dict:
        hist = label_histograms(self.train.labels.numpy(), self.shards, self.train.num_classes)
        return {"dataset": self.train.name, "method": self.cfg.data.partition,
                "concentration": self.cfg.data.concentration, "n_samples": self.n_samples,
                "label_histograms": hist}

    def restrict(self, devices) -> "Experiment":
        """This experiment with only the training rows ``devices`` use (a worker's own shards)."""
        from seafl_dist.data import ArrayDataset
        keep = [np.asarray(self.shards[d], dtype=np.int64) for d in devices]
        rows = torch.as_tensor(np.concatenate(keep) if keep else np.zeros(0, dtype=np.int64))
        t = self.train
        sub = ArrayDataset(t.images.index_select(0, rows), t.labels.index_select(0, rows), t.num_classes, t.name,
                           t.mean, t.std, list(t.classes))
        shards, offset = [np.zeros(0, dtype=np.int64)] * len(self.shards), 0
        for d, idx in zip(devices, keep):
            shards[d] = np.arange(offset, offset + len(idx), dtype=np.int64)
            offset += len(idx)
        return Experiment(cfg=self.cfg, train=sub, test=self.test, shards=shards, device=self.device,
                          _n_samples=self.n_samples)

    def schedule(self) -> Lookahead:
        cfg = self.cfg
        speed = SpeedModel(cfg.clock, self.n_samples, cfg.run.seed, cfg.train.epochs)
        sched = Scheduler(num_devices=cfg.devices.num, concurrency=cfg.devices.concurrency,
                          buffer_size=cfg.algorithm.buffer_size, staleness_limit=cfg.algorithm.staleness_limit,
                          partial=cfg.algorithm.partial_training, plan=speed.plan, seed=cfg.run.seed,
                          upload_s=cfg.clock.upload_s, n_samples=self.n_samples,
                          max_aggregations=cfg.run.max_aggregations, max_time=cfg.run.max_time)
        return Lookahead(sched.events())


def prepare(cfg: Config, *, local_rank: int = 0, need_test: bool = True) -> Experiment:
    """Datasets and shards from ``data.seed`` (default ``run.seed``): the split is its own stream, so
    holding ``data.seed`` fixed while ``run.seed`` varies changes training and the schedule only."""
    d = cfg.data
    common = dict(download=d.download, seed=cfg.data_seed, test_fraction=d.test_fraction, emnist_split=d.emnist_split)
    train = load_dataset(d.name, d.root, train=True, **common)
    test = load_dataset(d.name, d.root, train=False, **common) if need_test else None
    try:
        shards = partition(train.labels.numpy(), cfg.devices.num, method=d.partition, concentration=d.concentration,
                           samples_per_device=d.samples_per_device,
                           seed=stream_seed(cfg.data_seed, "partition"))
    except ValueError as err:  # an impossible request (devices.num / data.samples_per_device) is a user mistake
        raise ConfigError(f"cannot partition {train.name} ({len(train)} training samples): {err}") from None
    shards = [np.asarray(s, dtype=np.int64) for s in shards]
    return Experiment(cfg=cfg, train=train, test=test, shards=shards, device=pick_device(cfg.runtime.device, local_rank))
