"""Everything a run needs, built from the config: datasets, shards, the model factory, the clock.

Every rank calls :func:`prepare`; each piece is a pure function of (config, seed), so all
ranks agree on shards, initial weights and the schedule without talking to each other.
"""
from __future__ import annotations

import dataclasses
import gc
import sys
from dataclasses import dataclass

import numpy as np
import torch

from seafl_dist.settings import Config, ConfigError
from seafl_dist.runtime import controls, determinism
from seafl_dist.runtime.device_eval import gather, held_out_split
from seafl_dist.runtime.model_checks import (built, check_dp_model, check_inputs, check_model_size,
                                            check_target_metric, check_user_model, say_unused_optimizer_keys)
from seafl_dist.runtime.shards import check_private_test, make_shards
from seafl_dist.data import clear_cache, load_dataset
from seafl_dist.data.holdout import validation_data
from seafl_dist.data.server_set import server_set
from seafl_dist.data.datamodule import is_datamodule_path
from seafl_dist.data.labels import class_labels, keys
from seafl_dist.data.partition import label_counts
from seafl_dist.models import build_model
from seafl_dist.settings.plugins import FLWR, is_import_path
from seafl_dist.codecs import UpdateCodec
from seafl_dist.sim import Lookahead, Scheduler, SpeedModel, stream_seed
from seafl_dist.sim.clock import scaled_upload
from seafl_dist.sim.compass import from_config as compass_schedule
from seafl_dist.sim.devices import population_settings
from seafl_dist.sim.profiles import read_profiles
from seafl_dist.algo import FlatParts, memory_of
from seafl_dist.runtime.server_data import ServerData
from seafl_dist.threats import Threats
from seafl_dist.train import FlatLayout, epoch_sizes, flatten


EVAL_PROBE_ROWS = 64  # test rows a module's own evaluation is probed on at start-up


def pick_device(choice: str, local_rank: int = 0) -> torch.device:
    """``runtime.device``: auto = cuda:LOCAL_RANK (mod the GPU count) when CUDA is there, else cpu."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("runtime.device is 'cuda' but no CUDA GPU is visible; use runtime.device=auto or cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


@dataclass
class Experiment:
    cfg: Config
    train: object  # ArrayDataset
    test: object | None  # ArrayDataset, loaded where evaluation happens
    shards: list  # list[np.ndarray] of train indices, one per device
    device: torch.device
    _n_samples: list | None = None  # kept by restrict(): the clock needs every device's n_k
    writers: list | None = None  # data.partition=natural: device k's writer, for the partition record
    profile: object | None = None  # devices.profile's ProfileTable, read (and checked) by prepare()
    eval_names: list | None = None  # a module evaluated by its own test_step: what it logs (prepare() probes it)
    held_out: object | None = None  # rank 0, run.device_eval_every set: the chosen devices' held-out rows (HeldOut)
    _threats: Threats | None = None  # made at first use (threats/)
    dp_fixes: list | None = None  # train.dp_sgd.fix_modules: the layers Opacus's fix replaced (train/dp_sgd.py)
    server_held: object | None = None  # algorithm.defense.server_samples: the server-held set (data/server_set.py)
    dp_noise: float | None = None  # train.dp_sgd.target_epsilon: σ calibrated over the schedule (prepare())
    dp_key: object | None = None  # train.dp_sgd: the devices' key (privacy/device_key.py), set by a runner that trains

    @property
    def dp_sgd(self):
        """The ``train.dp_sgd`` section the jobs train by: the config's, σ calibrated (``dp_noise``) under
        ``target_epsilon`` (privacy/record_accountant.py ``calibrate``); config.yaml keeps what was given."""
        dp = self.cfg.train.dp_sgd
        return dp if self.dp_noise is None else dataclasses.replace(dp, noise_multiplier=self.dp_noise)

    @property
    def n_samples(self) -> list[int]:
        return list(self._n_samples) if self._n_samples is not None else [len(s) for s in self.shards]

    @property
    def num_devices(self) -> int:
        """N, resolved: ``devices.num``, or the writer count where it is null (``data.partition: natural``)."""
        return len(self.shards)

    @property
    def threats(self) -> Threats:
        """The malicious devices and their attack (threats/; a pure function of the config, so every rank's agree)."""
        if self._threats is None:
            self._threats = Threats(self.cfg, self.num_devices, self.flat_parts)
        return self._threats

    def rule_memory(self):
        """The server's holder of the rule's state (algo/memory.py), with the server-held set's computations when a
        defense reads it (runtime/server_data.py)."""
        memory = memory_of(self.cfg.algorithm)
        if self.server_held is not None:
            memory.server = ServerData(self)
        return memory

    def new_model(self, lightning: bool = False):
        """A fresh model for this dataset (weights are overwritten from a flat vector): the plain
        nn.Module form of a built-in model, so no rank pays for importing Lightning (see models/base.py);
        ``lightning``: its LightningModule twin (same state_dict), what ``train.loop: lightning`` trains. Under
        ``train.dp_sgd.fix_modules`` the layers Opacus cannot train are replaced as its ModuleValidator proposes
        (train/dp_sgd.py ``fix_model``), in every model of the run."""
        d, m = self.train, self.cfg.model
        model = build_model(m.name, d.num_classes, d.in_channels, width=m.width, image_size=d.image_size,
                            optim=self.cfg.train, lightning=lightning, params=m.params)
        if self.cfg.train.dp_sgd.enabled and self.cfg.train.dp_sgd.fix_modules:
            from seafl_dist.train.dp_sgd import fix_model
            fix_model(model)
        return model

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
        """What the run dir records of the split (report/partition.py writes it, compactly for large N)."""
        labels = class_labels(self.train, keys(self.cfg.data)[0])  # a DataModule's may declare none: no histograms
        hist = label_counts(labels, self.shards, max(self.train.num_classes, int(labels.max(initial=-1)) + 1)) \
            if labels is not None and not self.cfg.privacy.withheld else None  # under DP: devices' data
        d = self.cfg.data
        natural = d.partition == "natural" or d.partition.startswith(FLWR)  # no concentration involved
        held = {"device_holdout": d.device_holdout} if d.device_holdout else {}  # the shards are the training parts
        return {"dataset": self.train.name, "method": d.partition,
                **({"partition_by": d.partition_by} if d.partition_by is not None else {}),
                **({"partition_args": d.partition_args} if d.partition_args is not None else {}),
                "concentration": None if natural else d.concentration,
                **held, **({"device_test": d.device_test} if d.device_test != "split" else {}),
                "n_samples": np.array(self.n_samples, dtype=np.int64),
                **({"label_histograms": hist} if hist is not None else {}),
                **({"writers": self.writers} if self.writers is not None else {}),
                **({"malicious": list(self.threats.malicious)} if self.cfg.threats.active else {})}

    def restrict(self, devices) -> "Experiment":
        """This experiment with only the training rows ``devices`` use (a worker's own shards)."""
        keep = {d: np.asarray(self.shards[d], dtype=np.int64) for d in devices}
        # each row once, even where shards overlap (data.shards_overlap); shards become positions in it
        rows = np.unique(np.concatenate(list(keep.values()))) if keep else np.zeros(0, dtype=np.int64)
        t = self.train
        sub = t if len(rows) == len(t) else t.take(rows)  # every row (shards covering the set): no copy
        shards = [np.zeros(0, dtype=np.int64)] * len(self.shards)
        for d, idx in keep.items():
            shards[d] = np.searchsorted(rows, idx).astype(np.int64)
        return Experiment(cfg=self.cfg, train=sub, test=self.test, shards=shards, device=self.device,
                          _n_samples=self.n_samples, writers=self.writers, profile=self.profile,
                          eval_names=self.eval_names, held_out=self.held_out, dp_fixes=self.dp_fixes,
                          server_held=self.server_held, dp_noise=self.dp_noise)

    def upload_sizes(self) -> dict:
        """``{"bytes": an upload's bytes, "model_bytes": the float32 model's}`` with ``compression.codec`` (a
        function of the codec and the model's layout, known before anything trains); {} without one. SCAFFOLD's upload
        carries Δc beside the model: 4 bytes more a trainable parameter (runtime/controls.py)."""
        layout = FlatLayout.of(self.new_model())
        codec, extra = UpdateCodec(self.cfg.compression, layout), controls.extra_bytes(self.cfg, layout)
        if extra:
            return {"bytes": codec.model_bytes + extra, "model_bytes": codec.model_bytes}
        return {"bytes": codec.upload_bytes, "model_bytes": codec.model_bytes} if codec.active else {}

    def schedule(self) -> Lookahead:
        cfg = self.cfg
        fast = self.threats.malicious if cfg.threats.fast else ()  # fast attackers: the smallest idle times
        speed = SpeedModel(cfg.clock, self.n_samples, cfg.run.seed, cfg.train.epochs, fast)
        sizes = self.upload_sizes()  # a compressed upload is shorter on the clock (docs/compression.md)
        model_bytes = sizes.get("model_bytes", 4 * FlatLayout.of(self.new_model()).numel)
        upload_s = scaled_upload(cfg.clock.upload_s, sizes["bytes"], model_bytes) if sizes else cfg.clock.upload_s
        if cfg.algorithm.name == "fedcompass":  # local steps assigned per device from the clock (sim/compass.py)
            steps = [len(epoch_sizes(n, cfg.train.batch_size)) for n in self.n_samples]
            return Lookahead(compass_schedule(cfg, self.n_samples, steps, upload_s=upload_s, upload_sizes=sizes).events())
        churn = {}  # device profiles, availability, dropouts (docs/devices.md); {} without them: as before
        if self.profile is not None or cfg.devices.dropout is not None:
            churn = population_settings(
                profile=self.profile, dropout=cfg.devices.dropout, num_devices=self.num_devices,
                data_seed=cfg.data_seed, n_samples=self.n_samples, epochs=cfg.train.epochs,
                model_bytes=model_bytes + (sizes["bytes"] - model_bytes if controls.active(cfg) else 0),  # SCAFFOLD: c
                upload_bytes=sizes.get("bytes"), availability_scale=cfg.devices.availability_scale,
                compute_scale=cfg.clock.compute_scale, download_s=cfg.clock.download_s,
                idle=None if cfg.clock.idle.distribution == "none" else speed)
            churn.pop("profile_sha256", None)  # the server records it (runtime/server.py)
        sched = Scheduler(num_devices=self.num_devices, concurrency=cfg.devices.concurrency,
                          buffer_size=cfg.algorithm.buffer_size, staleness_limit=cfg.algorithm.staleness_limit,
                          partial=cfg.algorithm.partial_training, plan=churn.pop("plan", speed.plan), seed=cfg.run.seed,
                          upload_s=upload_s, n_samples=self.n_samples, upload_sizes=sizes,
                          max_aggregations=cfg.run.max_aggregations, max_time=cfg.run.max_time,
                          max_participation=cfg.privacy.max_participation if cfg.privacy.enabled else None, **churn)
        return Lookahead(sched.events())


def keep_only(exp: Experiment, devices) -> Experiment:
    """``exp`` with only the training rows of ``devices`` (rank 0: none), the whole training set
    also dropped from the loader cache: a worker then holds its own shards, not the dataset. The
    caller must drop its own reference to ``exp``."""
    small = exp.restrict(devices)
    clear_cache()  # the test set stays alive through small.test where it is needed
    del exp
    gc.collect()
    return small


def prepare(cfg: Config, *, local_rank: int = 0, need_test: bool = True, fetch=None) -> Experiment:
    """The run's experiment on this rank. ``fetch(load)``, if given, decides who downloads when
    ``data.download`` is set (distributed runs: :func:`seafl_dist.runtime.fetch.once_per_node`).
    Datasets and shards come from ``data.seed`` (default ``run.seed``): the split is its own stream,
    so holding ``data.seed`` fixed while ``run.seed`` varies changes training and the schedule only."""
    d = cfg.data
    if cfg.runtime.deterministic:  # before anything touches the GPU (cuBLAS reads its variable then)
        determinism.apply()

    def load(download: bool):
        common = dict(download=download, seed=cfg.data_seed, test_fraction=d.test_fraction, emnist_split=d.emnist_split,
                      files=d.files, columns=d.columns, splits=d.splits)
        return (load_dataset(d.name, d.root, train=True, **common),
                load_dataset(d.name, d.root, train=False, **common) if need_test and not d.validation else None)

    # a DataModule's prepare_data runs where a download would: once per node (runtime/fetch.py), here in one process
    prepares = d.download or (is_import_path(d.name) and is_datamodule_path(d.name))
    train, test = fetch(load) if fetch is not None and prepares else load(prepares)
    if d.augment and train.inputs == "samples":
        raise ConfigError(f"config key 'data.augment' has value True; allowed: false for data.name={d.name}, a "
                          "DataModule: crop and flip are for the built-in image sets; augment in its dataset or collate")
    if d.validation:  # the server's slice of the training set, evaluated in place of the test set (data/holdout.py)
        train, held = validation_data(train, d.validation, stream_seed(cfg.data_seed, "validation"))
        test = held if need_test else None
    server_held = None
    if cfg.algorithm.defense.server_samples:  # the defenses' server-held set, before the partition (data/server_set.py)
        train, server_held = server_set(train, cfg.algorithm.defense.server_samples,
                                        stream_seed(cfg.data_seed, "server_data"))
    shards, writers = make_shards(cfg, train)
    if cfg.privacy.enabled and test is not None and writers is not None:
        check_private_test(cfg, test, writers)  # the test set may not be the devices' own held-out samples
    shards, held = held_out_split(cfg, train, shards)  # data.device_holdout: the shards become the training parts
    if cfg.threats.active:  # a data attack on the malicious devices' training parts (threats/data.py)
        if cfg.threats.attack == "backdoor" and cfg.threats.backdoor_target >= train.num_classes:
            raise ConfigError(f"config key 'threats.backdoor_target' has value {cfg.threats.backdoor_target}; "
                              f"allowed: a label of {train.name}, below its {train.num_classes} classes")
        train = Threats(cfg, len(shards)).poison(train, shards)
    cfg.algorithm.num_devices = len(shards)  # N, resolved (devices.num null: the writers): CA²FL's mean (algo/ca2fl.py)
    check_inputs(cfg, train.inputs)
    check_model_size(cfg, train.num_classes, train.in_channels, train.image_size, num_devices=len(shards))
    exp = Experiment(cfg=cfg, train=train, test=test, shards=shards, device=pick_device(cfg.runtime.device, local_rank),
                     writers=writers, profile=read_profiles(cfg.devices.profile) if cfg.devices.profile else None,
                     held_out=gather(cfg, train, test, held, writers) if need_test else None, server_held=server_held)
    if cfg.runtime.deterministic:  # first: an op without a deterministic implementation fails any forward
        determinism.check_model(exp)
    if cfg.train.dp_sgd.enabled:  # Opacus installed, and a model it can train (or fixed), before any probe
        exp.dp_fixes = check_dp_model(cfg, exp)
        from seafl_dist.privacy.record_accountant import calibrated_noise, delta_warning
        from seafl_dist.train.dp_sgd import job_steps
        exp.dp_noise = calibrated_noise(exp, job_steps, say=need_test)  # target_epsilon: σ over the replayed schedule
        if need_test and delta_warning(exp.n_samples, cfg.privacy.delta):  # rank 0: a δ too large for a shard
            print(delta_warning(exp.n_samples, cfg.privacy.delta), file=sys.stderr)
    if is_import_path(cfg.model.name):  # a user's model: checked before any job trains
        with torch.random.fork_rng(devices=[]):  # building it must not move torch's global generator
            rows = test.take(np.arange(min(EVAL_PROBE_ROWS, len(test)))) if test is not None else None
            model = built(cfg, exp.new_model)
            exp.eval_names = check_user_model(cfg, model, train, train.num_classes, exp.device, rows, exp.dp_sgd)
        if need_test:
            check_target_metric(cfg, exp.eval_names)
        say_unused_optimizer_keys(cfg, model)
    elif need_test:
        check_target_metric(cfg, exp.eval_names)
    return exp
