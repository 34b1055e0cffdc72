"""Flower Datasets' partitioners as the partition: ``data.partition: flwr:<Partitioner>`` (needs the ``hf`` extra).

    shards = flower_partition("flwr:DirichletPartitioner", {"partition_by": "label", "alpha": 0.3, "seed": 42},
                              train, num_devices=10)

The partitioner of ``flwr_datasets.partitioner`` named after ``flwr:`` is made with ``data.partition_args`` as
its arguments and ``devices.num`` as its ``num_partitions`` (a partitioner without one, ``NaturalIdPartitioner``,
makes as many partitions as it finds, and ``devices.num`` must be that many), and is handed the training set as
a Hugging Face Dataset; device k's shard is the rows of its partition k, in the order Flower gives them. So a
study here and a Flower study of the same dataset with the same partitioner and arguments give each device the
same rows (tests/integration/test_hf_flower.py checks Dirichlet, Pathological and NaturalId against Flower).

The Dataset handed over: a Hugging Face source's own training split (data/hf.py), its columns as they are; any
other source's as a table of the one column the partitioner reads (``partition_by``): ``label`` is the
dataset's labels (data/labels.py), another key is read from its samples (``data.partition_by``'s rule). The
seed is the partitioner's own (``seed`` in ``data.partition_args``, else Flower's default), not ``data.seed``.

Refused in one line: a partitioner that is not one of Flower's row partitioners, arguments it does not take,
``num_partitions`` given (it is ``devices.num``), a partition count that is not ``devices.num``, and an empty
partition (every device needs a sample).
"""
from __future__ import annotations

import inspect

import numpy as np

from ..settings import ConfigError
from ..settings.plugins import FLWR
from .labels import class_labels

ROW = "__seafl_row"  # the column that carries each row's position through the partitioner


def _refuse(name: str, problem: str) -> ConfigError:
    return ConfigError(f"config key 'data.partition' has value {name!r}: {problem}")


def partitioner_class(name: str):
    """The class ``flwr:<Name>`` names, or one ConfigError line (the extra missing, or no such partitioner)."""
    try:
        import flwr_datasets.partitioner as partitioners
    except ImportError:
        raise _refuse(name, 'Flower Datasets is not installed: pip install -e ".[hf]"') from None
    cls = getattr(partitioners, name[len(FLWR):], None)
    rows = [n for n in partitioners.__all__ if n != "Partitioner" and not n.startswith("Vertical")]
    if not inspect.isclass(cls) or name[len(FLWR):] not in rows:
        raise _refuse(name, f"no such row partitioner in flwr_datasets; one of {', '.join(sorted(rows))}")
    return cls


def flower_partition(name: str, args: dict | None, train, num_devices: int | None) -> list[np.ndarray]:
    """Device k's rows of ``train``: partition k of the partitioner ``name`` (module doc)."""
    cls, args = partitioner_class(name), dict(args or {})
    params = inspect.signature(cls.__init__).parameters
    if "num_partitions" in args:
        raise ConfigError(f"config key 'data.partition_args' has value {args!r}: num_partitions is devices.num; "
                          "leave it out")
    unknown = sorted(set(args) - set(params) - {"self"})
    if unknown:
        takes = ", ".join(p for p in params if p not in ("self", "num_partitions"))
        raise ConfigError(f"config key 'data.partition_args' has value {args!r}: {cls.__name__} takes no "
                          f"{', '.join(unknown)}; it takes {takes}")
    if "num_partitions" in params:
        args["num_partitions"] = num_devices
    try:
        partitioner = cls(**args)
        partitioner.dataset = _table(name, train, args.get("partition_by"))
        count = partitioner.num_partitions
    except (TypeError, ValueError, KeyError) as err:
        raise ConfigError(f"config key 'data.partition_args' has value {dict(args)!r}: {cls.__name__} refused "
                          f"them ({type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]})") from None
    if count != num_devices:
        raise ConfigError(f"config key 'devices.num' has value {num_devices!r}; allowed: {count} for "
                          f"data.partition={name}, the partitions it makes of {train.name}")
    shards = []
    for k in range(count):
        rows = np.asarray(partitioner.load_partition(k)[ROW], dtype=np.int64)
        if rows.size == 0:
            raise _refuse(name, f"its partition {k} is empty (every device needs a sample); change "
                                "data.partition_args or devices.num")
        shards.append(rows)
    return shards


def _table(name: str, train, by: str | None):
    """``train`` as a Hugging Face Dataset the partitioner reads, with each row's position under :data:`ROW`."""
    import datasets
    own = getattr(train, "hf_split", None)
    if own is None and hasattr(getattr(train, "dataset", None), "ds"):  # a Hugging Face source's samples
        own = train.dataset.ds
    if own is not None:
        keep = [by] if by is not None else []
        if by is not None and by not in own.column_names:
            raise ConfigError(f"config key 'data.partition_args' has value partition_by={by!r}; allowed: a column "
                              f"of {train.name}: {', '.join(own.column_names)}")
        table = own.select_columns(keep) if keep else datasets.Dataset.from_dict({"_": [0] * len(own)})
    elif by is None:
        table = datasets.Dataset.from_dict({"_": [0] * len(train)})
    elif by == "label" and class_labels(train) is not None:
        table = datasets.Dataset.from_dict({"label": class_labels(train).tolist()})
    else:
        if not hasattr(train, "field"):
            raise ConfigError(f"config key 'data.partition_args' has value partition_by={by!r}; allowed: label for "
                              f"data.name={train.name}, whose samples have no other key")
        table = datasets.Dataset.from_dict({by: list(train.field(by))})
    return table.add_column(ROW, np.arange(len(table), dtype=np.int64))
