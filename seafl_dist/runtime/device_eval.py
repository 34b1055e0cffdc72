"""Device evaluation: the global model of a version on each chosen device's held-out data (rank 0 only).

    held = held_out_split(cfg, train, shards)                 # every rank: (training shards, held-out parts)
    exp.held_out = gather(cfg, train, test, held, writers)    # rank 0: the chosen devices' rows, kept
    stage = DeviceEvaluation.of(exp, callbacks)               # the server calls it at one place per step

What it owns: which devices are evaluated (every device, or ``run.device_eval_sample`` of them drawn once from
the ``device_eval_sample`` stream of ``data.seed`` and kept for the whole run, so the same devices are compared
over time and across arms of one data seed), their held-out rows (gathered on rank 0 before the training set is
dropped; the split itself is data/holdout.py), when it evaluates (after every ``run.device_eval_every``-th
aggregation, a multiple of ``run.eval_every``, so always beside a central evaluation, and at the run's last
evaluation), how (by the module's own ``test_step`` where it has one, one device at a time, else as the built-in
models are evaluated, every device in one pass: train/evaluation.py), and what comes of it: device_metrics.csv,
device_summary.csv (report/device_eval.py), the progress line's worst-side decile, ``on_device_eval`` to the
callbacks (W&B), summary.json's ``device_eval``, and its part of a checkpoint. It reads the global model and
nothing else: the virtual clock, the schedule and every other file are what they are without it. With
``run.device_eval_every`` null, :meth:`DeviceEvaluation.of` gives :class:`Off`, which does nothing.
"""
from __future__ import annotations

import numpy as np

from seafl_dist.data.holdout import HeldOut, split_holdout, writer_holdout
from seafl_dist.data.labels import class_labels, keys, sample_groups
from seafl_dist.report.device_eval import DeviceEvalFiles, direction, summarise
from seafl_dist.report.metric import BUILT_IN, Metric
from seafl_dist.settings import ConfigError
from seafl_dist.sim import stream, stream_seed
from seafl_dist.train.evaluation import evaluate_by_step, evaluate_groups


def held_out_split(cfg, train, shards: list) -> tuple[list, list | None]:
    """(training shards, held-out parts into ``train``) by ``data.device_holdout`` (None when it is 0): one draw from
    the ``device_holdout`` stream of ``data.seed``, stratified by the training labels where the data has them."""
    if cfg.data.device_holdout <= 0:
        return shards, None
    seed = stream_seed(cfg.data_seed, "device_holdout")
    return split_holdout(shards, cfg.data.device_holdout, seed, labels=class_labels(train, keys(cfg.data)[0]))


def eval_devices(cfg, num_devices: int) -> np.ndarray:
    """The devices evaluated: all, or ``run.device_eval_sample`` of them (sorted), drawn once from ``data.seed``."""
    m = cfg.run.device_eval_sample
    if m is None or m >= num_devices:
        return np.arange(num_devices, dtype=np.int64)
    return np.sort(stream(cfg.data_seed, "device_eval_sample").choice(num_devices, size=m, replace=False))


def gather(cfg, train, test, held: list | None, writers: list | None) -> HeldOut | None:
    """The chosen devices' held-out rows (None with device evaluation off): of ``train`` by the split, or of ``test``
    by the writers' names (``data.device_test: writers``)."""
    if cfg.run.device_eval_every is None:
        return None
    devices = eval_devices(cfg, len(writers) if writers is not None and held is None else len(held))
    if cfg.data.device_test == "writers":
        groups = sample_groups(test, keys(cfg.data)[1])
        if groups is None:
            raise ConfigError(f"config key 'data.device_test' has value 'writers'; allowed: split for data.name="
                              f"{cfg.data.name}, whose test set has no writers (femnist and shakespeare have; a "
                              "DataModule's test samples are grouped by data.partition_by)")
        held = writer_holdout(writers, groups)
        found = HeldOut.of(test, held, devices)
        if not found.sizes.any():
            raise ConfigError("config key 'data.device_test' has value 'writers'; allowed: split here: no writer "
                              "evaluated has a sample in the test files (LEAF's -t user split gives the test set "
                              "other writers)")
        return found
    return HeldOut.of(train, held, devices)


class Off:
    """Device evaluation off: every call does nothing, so nothing of a run changes."""

    def open(self, run_dir, state) -> None:
        pass

    def at(self, version: int, time: float, flat) -> None:
        return None

    def finish(self, row: dict, flat) -> None:
        pass

    def flush(self, sync: bool = False) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        pass

    def summary(self) -> dict:
        return {}

    def close(self) -> None:
        pass


class DeviceEvaluation(Off):
    """The stage (module doc). ``at(version, time, flat)`` after a central evaluation; ``finish`` after the loop."""

    @classmethod
    def of(cls, exp, callbacks=()) -> "DeviceEvaluation | Off":
        return Off() if exp.cfg.run.device_eval_every is None else cls(exp, callbacks)

    def __init__(self, exp, callbacks=()):
        self.exp, self.cfg, self.held = exp, exp.cfg, exp.held_out
        self.callbacks = callbacks
        self.every = self.cfg.run.device_eval_every
        self.model = exp.new_model()
        self.names = list(exp.eval_names) if exp.eval_names is not None else list(BUILT_IN)
        self.metric = Metric.of(self.cfg.run)
        self.files: DeviceEvalFiles | None = None
        self.last: dict | None = None  # the last evaluation's summary (summary.json, a checkpoint)

    def open(self, run_dir, state: dict | None) -> None:
        """Start the files afresh, or (``state``: a checkpoint) cut them back to its lengths and go on."""
        kept = (state or {}).get("device_eval")
        self.files = DeviceEvalFiles(run_dir, self.names, resume_at=tuple(kept["bytes"]) if kept else None)

    def at(self, version: int, time: float, flat) -> str | None:
        """After the central evaluation of ``version``: evaluate when it is due; the progress line's note."""
        if version % self.every:
            return None
        return self._evaluate(version, time, flat)

    def finish(self, row: dict, flat) -> None:
        """After the loop: the run's last evaluation (``row``, of the final model ``flat``) is evaluated here too."""
        if self.last is None or self.last["version"] != row["version"]:
            self._evaluate(row["version"], row["time"], flat)

    def _values(self, flat) -> dict[str, np.ndarray]:
        held, exp = self.held, self.exp
        data = held.data.to(exp.device)
        precision = self.cfg.runtime.precision
        if self.exp.eval_names is None:
            acc, loss = evaluate_groups(self.model, flat, data, held.offsets, device=exp.device, precision=precision)
            return {"accuracy": acc, "loss": loss}
        out = {n: np.full(len(held.devices), np.nan) for n in self.names}
        for i, size in enumerate(held.sizes):
            if size:
                logged = evaluate_by_step(self.model, flat, held.rows(i, data), device=exp.device,
                                          precision=precision)
                for n in self.names:
                    value = logged.get(n)
                    out[n][i] = np.nan if value is None else float(value)
        return out

    def _evaluate(self, version: int, time: float, flat) -> str:
        values = self._values(flat)
        sizes = self.held.sizes
        run = self.cfg.run
        stats = {n: summarise(values[n], sizes, direction(n, run.target_metric, run.target_mode)) for n in self.names}
        self.files.write(version, time, self.held.devices, sizes, values, stats)
        self.files.flush()
        self.last = {"version": version, "time": time, "devices": int(len(sizes)), "metrics": stats}
        for cb in self.callbacks:
            hook = getattr(cb, "on_device_eval", None)
            if hook is not None:
                counted = values[self.metric.name][(sizes > 0) & np.isfinite(values[self.metric.name])]
                hook(version, time, stats, counted)  # the devices summarise counts: no NaN, no ±inf
        return self.note()

    def note(self) -> str | None:
        """The progress line's addition: the target metric's worst-side decile over the devices."""
        if self.last is None:
            return None
        worst = "p90" if self.metric.mode == "min" else "p10"
        value = self.last["metrics"][self.metric.name][worst]
        return f"devices {worst} {'-' if value is None else f'{value:.4f}'}"

    def flush(self, sync: bool = False) -> dict:
        """Both files pushed out; what a checkpoint keeps of the stage (their lengths, the last summary)."""
        return {"device_eval": {"bytes": list(self.files.flush(sync)), "last": self.last}}

    def restore(self, state: dict) -> None:
        self.last = state["device_eval"]["last"]

    def summary(self) -> dict:
        """summary.json's ``device_eval``: the last evaluation's statistics."""
        return {"device_eval": self.last}

    def close(self) -> None:
        if self.files is not None:
            self.files.close()
