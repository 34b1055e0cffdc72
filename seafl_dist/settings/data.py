"""The ``data`` section: which dataset, and how its samples become the devices' shards and held-out parts.

It mirrors the data room (seafl_dist/data/): the name (a built-in set, a loader's import path or a
LightningDataModule's), where it lives, the partition (``dirichlet``, ``iid``, ``natural`` or a user's split),
what the partition reads (``partition_by``: a key of a DataModule's samples, data/labels.py), the split's own seed
and the per-device held-out data. ``__post_init__`` checks each key against its domain, then what relates them;
every check names the key, the value and what is allowed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import SEEDS, OneOf, Text, check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key
from seafl_dist.settings.plugins import FLWR, HF

WITHOUT_WRITERS = ("digits", "mnist", "emnist", "cifar10", "cinic10")  # built-in datasets natural cannot split
WITH_WRITERS = ("femnist", "shakespeare")  # LEAF's: one writer (a FEMNIST writer, a Shakespeare role) a device
TOKEN_DATASETS = ("shakespeare",)  # built-in datasets of token sequences; every other built-in one holds images
EMNIST_SPLITS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")  # torchvision's EMNIST.splits




HF_OR_PLUGIN = OneOf(WITHOUT_WRITERS + WITH_WRITERS, plugin=True, prefix=HF)
FLWR_OR_PLUGIN = OneOf(("dirichlet", "iid", "natural"), plugin=True, prefix=FLWR)


@dataclass(kw_only=True)
class DataConfig:
    name: str = key("digits", "the dataset: `digits` (bundled), `mnist`, `emnist`, `cifar10`, `cinic10`, `femnist` "
                    "(LEAF's JSON files, by writer), `shakespeare` (LEAF's, by role: next-character prediction), "
                    "`pkg.module:loader`, `pkg.module:MyDataModule` (a LightningDataModule, docs/extending.md), or "
                    "`hf:<path>` (a Hugging Face dataset: saved with `save_to_disk`, a builder with `data.files`, "
                    "or a hub name; needs `pip install -e \".[hf]\"`)", HF_OR_PLUGIN)
    root: str = key("data", "directory the on-disk datasets live in")
    files: Optional[dict] = key(
        None, "`hf:<builder>` only: the files of each split, as Hugging Face's `data_files` (`{train: a.parquet, "
              "test: b.parquet}`; a value may be a list or a glob)",
        note="With `data.files` the name after `hf:` is a builder of the `datasets` library: `parquet`, `csv`, "
             "`json` or `imagefolder` (docs/datasets.md, \"Your data\").")
    columns: Optional[dict] = key(
        None, "`hf:` only: the columns `{input: ..., label: ..., group: ...}`; `null` or a key left out: `image` (or "
              "`img`) and `label`, no group")
    splits: Optional[dict] = key(
        None, "`hf:` only: which of the dataset's splits are `{train: ..., test: ...}`; `null` or a key left out: "
              "its `train` and `test`")
    download: bool = key(False, "fetch a missing MNIST, EMNIST or CIFAR-10 through torchvision (needs internet)")
    partition: str = key("dirichlet", "how samples are split into shards: `dirichlet` (label skew), `iid`, "
                         "`natural` (one device per writer: femnist, shakespeare; or per group of `data.partition_by`), "
                         "`pkg.module:split`, or `flwr:<Partitioner>` (a Flower Datasets partitioner, with "
                         "`data.partition_args`)",
                         FLWR_OR_PLUGIN,
                         note="`natural`: device k is the k-th writer (group) of an order seeded by `data.seed`, "
                              "with all of its training samples; `devices.num: null` takes every writer, N the "
                              "first N (docs/femnist.md).")
    partition_by: Optional[str] = key(
        None, "a DataModule's sample key the partition reads: with `natural`, the group (a speaker, a user) that makes "
              "a device; with `dirichlet` or `pkg.module:split`, the integer label; `null`: the writers (femnist, "
              "shakespeare) and the declared labels", Text(),
        note="Named as Flower Datasets' partitioners name it (`partition_by`): a key of dict samples, a position "
             "(`\"0\"`, `\"1\"`) of tuple samples, an attribute of other samples. Groups are named by their `str`; with "
             "`data.device_test: writers` a device's held-out data is the test samples of its group (docs/extending.md).")
    partition_args: Optional[dict] = key(
        None, "`flwr:<Partitioner>` only: its arguments, as Flower Datasets names them (`{partition_by: label, "
              "alpha: 0.3, seed: 42}`); `num_partitions` is `devices.num`",
        note="The partitioner's own `seed` seeds it (`data.seed` does not): the same arguments give the rows Flower "
             "gives. Without a `seed` it takes Flower's default.")
    shards_overlap: bool = key(False, "a custom `data.partition` may give devices shared samples",
                               note="Refused with `privacy.enabled: true`: user-level adjacency assumes disjoint "
                                    "shards (docs/privacy.md, \"Evaluation and adjacency\").")
    concentration: float = key(0.3, "Dirichlet concentration over labels (smaller: more skew)", "(0, inf)")
    samples_per_device: Optional[int] = key(None, "fixed shard size, drawn without replacement; `null`: the "
                                            "whole training set is shared out", "[1, inf)",
                                            note="Under DP, n_k is public by assumption (it drives the clock and "
                                                 "partition.json): a fixed size makes it reveal nothing.")
    test_fraction: float = key(0.2, "`digits` only: the seeded, stratified held-out share", "(0, 1)")
    emnist_split: str = key("balanced", "`emnist` only: the split (`balanced`: 47 classes)", EMNIST_SPLITS)
    augment: bool = key(False, "random crop and horizontal flip of training batches (CIFAR style)")
    seed: Optional[int] = key(None, "seed of the data split (shards; digits' hold-out); `null`: `run.seed`", SEEDS,
                              note="Fix `data.seed` to vary `run.seed` over one split: runs of different "
                                   "`run.seed` then train on the same shards.")
    device_holdout: float = key(
        0.0, "the share of each device's shard held out from its training, for device evaluation "
             "(`run.device_eval_every`); 0: none", "[0, 1)",
        note="Device k holds out ⌊f·n_k + ½⌋ of its n_k samples, stratified by label, drawn from a stream of its own "
             "under `data.seed` (the shards do not move). What it holds out it never trains on: n_k shrinks, and with "
             "it c_k = n_k × `clock.sec_per_sample` and SEAFL's and FedAvg's weights, so a run with a holdout is not "
             "the paper's schedule (docs/device_eval.md). Left out of config.yaml at 0.")
    validation: float = key(
        0.0, "the share of the training set the server holds out and evaluates on in place of the test set "
             "(tuning on data no result is reported on: docs/leaderboard.md); 0: none", "[0, 1)",
        note="⌊f·n + ½⌋ of the n training samples, stratified by label, drawn from a stream of its own under "
             "`data.seed` before the partition: the devices share out the rest, and no device trains on a validation "
             "sample. The run's accuracy, loss and targets are then the validation set's, and the test set is not "
             "read. Refused with `data.partition: natural` (a writer's samples are its device's) and with "
             "`privacy.enabled`. Left out of config.yaml at 0.")
    device_test: str = key("split", "device k's held-out data: `split` (its shard, by `data.device_holdout`) or "
                           "`writers` (`data.partition: natural`: its writer's own LEAF test samples, or its group's "
                           "test samples by `data.partition_by`)",
                           ("split", "writers"))

    def __post_init__(self) -> None:
        check_fields(self, "data")
        for name in ("files", "columns", "splits"):
            if getattr(self, name) is not None and not self.name.startswith(HF):
                _fail(f"data.{name}", getattr(self, name), f"null for data.name={self.name} (it is for hf:<path>)")
        if self.partition_args is not None and not self.partition.startswith(FLWR):
            _fail("data.partition_args", self.partition_args, f"null with data.partition={self.partition} (it is "
                  "for flwr:<Partitioner>)")
        if self.partition.startswith(FLWR) and (self.partition_by is not None or self.samples_per_device is not None):
            bad = "partition_by" if self.partition_by is not None else "samples_per_device"
            _fail(f"data.{bad}", getattr(self, bad), f"null with data.partition={self.partition} (name what the "
                  "partitioner reads in data.partition_args)")
        if self.partition == "natural" and self.name in WITHOUT_WRITERS:
            _fail("data.partition", self.partition, f"dirichlet, iid or an import path for data.name={self.name}: "
                  f"natural makes each writer a device and {self.name} has no writers (femnist and shakespeare have)")
        if self.partition_by is not None and (self.partition == "iid" or self.name in WITHOUT_WRITERS + WITH_WRITERS):
            _fail("data.partition_by", self.partition_by, f"null with data.partition=iid (it reads no labels or groups)"
                  if self.partition == "iid" else f"null for data.name={self.name}: its labels and writers are its "
                  "own; a key names a field of a DataModule's samples")
        if self.augment and self.name in TOKEN_DATASETS:
            _fail("data.augment", True, f"false for data.name={self.name}: its samples are character ids, and crop and "
                  "flip are for images")
        if self.partition == "natural" and self.samples_per_device is not None:
            _fail("data.samples_per_device", self.samples_per_device, "null with data.partition=natural (a "
                  "writer's shard is all of its samples)")
        if self.validation > 0 and self.partition == "natural":
            _fail("data.validation", self.validation, "0 with data.partition=natural: a writer's samples all belong to "
                  "its device, so none can be the server's (give data.partition=dirichlet or iid to tune on a split)")
        if self.device_test == "writers" and (self.partition != "natural" or self.device_holdout > 0):
            _fail("data.device_test", self.device_test, "split, unless data.partition=natural (writers' own test "
                  "samples) and data.device_holdout=0 (one source of held-out data)")
