"""The server: consumes the schedule, aggregates, evaluates, writes the run dir (rank 0 only).

The same loop serves the in-process runner and the distributed runtime; only the executor
(who trains a job) differs. For each scheduler event:
- start: look ahead for the epochs a job will train, hand it to the executor (a job that drops is never trained),
- notify / finish / drop: record; stall (device churn, docs/devices.md): record, end ``stalled``,
- aggregate: collect the jobs' models, apply the rule of ``algorithm.name`` and the server optimizer of
  ``algorithm.server_opt`` (``none``: the rule's result), bump the version, evaluate, stop early.

The end of each aggregation (its new jobs dispatched, its eval and start events written and flushed) is a
consistent state: the server snapshots it (references, no copies), writes it as a checkpoint when one is due
(runtime/checkpoint.py), and on an interrupt or failure writes the last snapshot, never the half-done aggregation.
``resume=`` a checkpoint path continues a run; at the normal end the final model goes to ``model.pt``,
``summary.json`` records every run file's size and sha256 (the proof runtime/rundir.py checks) and private/
(checkpoints, residuals) is deleted. The run holds the run dir's lock (runtime/runlock.py) from before its first
write to after its last. A file it cannot write (a full disk) ends it with a :class:`RunFileError` naming the
file and the checkpoint kept.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import torch

from seafl_dist.algo import ServerOptimizer
from seafl_dist.codecs import UpdateCodec
from seafl_dist.privacy.mechanism import mechanism_of
from seafl_dist.settings import dump_config
from seafl_dist.report import Progress, RunWriter
from seafl_dist.report.partition import write_partition
from seafl_dist.report.sinks import FINISHED, METRIC_COLUMNS, RunFileError, writing
from seafl_dist.runtime import checkpoint, rundir
from seafl_dist.runtime.controls import ServerControls
from seafl_dist.runtime.runlock import RunDirLock
from seafl_dist.runtime.device_eval import DeviceEvaluation
from seafl_dist.runtime.snapshots import Snapshots
from seafl_dist.runtime.executor import JobSpec
from seafl_dist.runtime.faults import NO_FAULT
from seafl_dist.runtime.summary import format_summary  # noqa: F401  (re-exported)
from seafl_dist.runtime.watch import Watch
from seafl_dist.report.metric import Metric
from seafl_dist.train import FlatLayout, evaluate, load_flat
from seafl_dist.train.evaluation import evaluate_by_step


def _is_start(ev: dict) -> bool:
    return ev["event"] == "start"


class Server(Snapshots):
    """Rank 0's loop. ``callbacks`` get ``on_aggregate(event)``, ``on_eval(row)`` and ``close(summary)``."""

    def __init__(self, exp, executor, out_dir, *, callbacks=(), progress: Progress | None = None,
                 partition_report: dict | None = None, resume: str | Path | None = None, hook=NO_FAULT):
        self.exp, self.cfg, self.executor = exp, exp.cfg, executor
        self.partition_report = partition_report or exp.partition_report()
        self.dir, self.resume = Path(out_dir), resume
        self.writer: RunWriter | None = None  # opened by run(), once a checkpoint to resume has loaded
        self.hook = hook  # the runner's test hook (runtime/faults.py); does nothing unless SEAFL_FAULT is set
        self._snap: dict | None = None  # the last consistent state (end of an aggregation)
        self._saved_version: int | None = None
        self._last_save = self._t0 = time.monotonic()
        self.wall_before = 0.0
        self.callbacks = self._with_records(exp, callbacks)  # and the DP-SGD ledger (runtime/snapshots.py)
        self.metric = Metric.of(self.cfg.run)  # what targets, stopping, best and final follow
        self.progress = progress or Progress.of(self.cfg, self.metric)  # logging.progress (report/progress.py)
        self.eval_model = exp.new_model()
        self.parts, self.codec = exp.flat_parts(), UpdateCodec(self.cfg.compression, FlatLayout.of(self.eval_model))
        self.privacy = mechanism_of(exp, FlatLayout.of(self.eval_model))  # stages 3-5 under DP (privacy/)
        self.rows, self.counts, self.staleness = [], Counter(), []  # metric rows, event counts, updates' staleness
        # device churn (docs/devices.md): drop counts in metrics.csv and summary.json only when it is on
        self.churn = self.cfg.devices.profile is not None or self.cfg.devices.dropout is not None
        # a module's own test_step: what its probe evaluation logged (runtime/setup.py), columns after today's
        self.eval_names = exp.eval_names
        self.columns = METRIC_COLUMNS + (["drops"] if self.churn else []) + list(self.eval_names or exp.threats.columns)
        self.profile_sha256 = exp.profile.sha256 if exp.profile is not None else None
        self.stalled: str | None = None  # why the run could make no more progress
        self.diverged_stop = False  # the run diverged and run.stop_on_divergence ends it here
        self.watch = Watch(exp)  # update norms and divergence: stderr and summary.json only (runtime/watch.py)
        self.server_opt = ServerOptimizer(self.cfg.algorithm, self.parts)  # stage 6 (algo/server_opt.py)
        self.memory = exp.rule_memory()  # a stateful rule's state between aggregations (algo/memory.py)
        self.controls = ServerControls(self.cfg, self.parts, self.memory)  # SCAFFOLD's c, Δc (runtime/controls.py)
        self.devices = DeviceEvaluation.of(exp, self.callbacks)  # held-out data per device (runtime/device_eval.py)

    # ---- evaluation and metrics ---------------------------------------------------------
    def _evaluate(self, version: int, now: float, flat: torch.Tensor, agg: dict | None) -> dict:
        test, device, precision = self.exp.test.to(self.exp.device), self.exp.device, self.cfg.runtime.precision
        if self.eval_names is None:
            acc, loss = evaluate(self.eval_model, flat, test, device=device, precision=precision)
            metrics = self.exp.threats.scores(evaluate, self.eval_model, flat, test, device=device, precision=precision)
            self.writer.event({"event": "eval", "time": now, "version": version, "accuracy": acc, "loss": loss})
        else:  # the module's own test_step (train/evaluation.py): its logged values, beside null accuracy and loss
            acc = loss = None
            metrics = evaluate_by_step(self.eval_model, flat, test, device=device, precision=precision)
            self.writer.event({"event": "eval", "time": now, "version": version, "accuracy": acc, "loss": loss,
                               "metrics": metrics})
        self.counts["eval"] += 1
        st = [u["staleness"] for u in agg["updates"]] if agg else []
        row = {"version": version, "time": now, "accuracy": acc, "loss": loss, "updates": len(st),
               "mean_staleness": sum(st) / len(st) if st else 0.0, "max_staleness": max(st, default=0),
               "notifications": self.counts["notify"], "rejected": self.counts["rejected"]}
        if self.churn:
            row["drops"] = self.counts["drop"]
        row.update((name, metrics.get(name)) for name in self.eval_names or self.exp.threats.columns)
        self.writer.metrics(row)
        self.rows.append(row)
        note = self.privacy.note(self.devices.at(version, now, flat))  # device evaluation's; ε so far under DP
        self.progress.update(version, now, row.get(self.metric.name), note=note)
        for cb in self.callbacks:
            cb.on_eval(row)
        self.diverged_stop = self.watch.evaluated(row)
        return row

    # ---- one aggregation ----------------------------------------------------------------
    def _aggregate(self, ev: dict, version: int, versions: dict) -> torch.Tensor:
        updates = self.controls.received(ev["updates"], self.executor.result, versions, self.codec.decode)  # stage 1
        updates = self.exp.threats.landed(ev, updates, versions.__getitem__)  # malicious ones marked (threats/)
        result = self.privacy.aggregate(ev, self.cfg.algorithm, version, versions[version], updates,  # the rule,
                                        versions.__getitem__, self.parts, self.watch.history, self.memory)  # DP: noised
        for u, info in zip(ev["updates"], result.info):
            u.update(info)
            self.counts["rejected"] += bool(info.get("rejected"))
            self.staleness.append(u["staleness"])
            if logged := self.privacy.released_log(self.executor.logged(u["job"])):  # report/trainlog.py
                u["logged"] = logged
        self.watch.aggregated(ev, result.norms)
        self.controls.taken(self.executor, ev["updates"])  # accepted or not: device state on the workers
        return self.server_opt.apply(versions[version], result, updates, versions.__getitem__)

    def run(self) -> dict:
        with RunDirLock(self.dir):  # one writer per run dir (runtime/runlock.py), held until the summary is written
            return self._run()

    def _run(self) -> dict:
        cfg = self.cfg
        self._t0 = time.monotonic()
        state = checkpoint.load(self.resume, cfg) if self.resume else None  # before anything is written
        self.dir.mkdir(parents=True, exist_ok=True)
        if state is None:
            rundir.clear(self.dir, cfg=cfg)  # nothing of an earlier run mixes in (its DP noise key and record aside)
            with writing(self.dir / "config.yaml"):
                (self.dir / "config.yaml").write_text(dump_config(cfg))
            write_partition(self.dir, self.partition_report)  # compact above COMPACT_ABOVE devices
            self.writer = RunWriter(self.dir, columns=self.columns)
        else:
            rundir.remove_temps(self.dir)  # of writes the interrupted part did not finish
            self.writer = RunWriter(self.dir, resume_at=(state["events_bytes"], state["metrics_bytes"]),
                                    columns=self.columns)
        self.devices.open(self.dir, state)
        self.privacy.open(rundir.private_dir(self.dir), state)  # the noise key, or secure noise's record (privacy/)
        status, error = "failed", None
        try:
            final = self._loop(state)
            self.devices.finish(self.rows[-1], final)  # the last evaluation's model on the devices, if not yet
            self.diverged_stop = self.watch.finished() or self.diverged_stop  # a collapse that lasted to the end
            # the normal end's goodbye to the workers; after a failure or an interrupt they may be
            # gone already, and waiting on them must not cost us the summary
            self.executor.close()
            self._save_model(final)
            status = "stalled" if self.stalled else "diverged" if self.diverged_stop else "completed"
        except KeyboardInterrupt as err:
            status = "interrupted"
            error = f"interrupted ({err or 'Ctrl-C'})" + getattr(self.executor, "diagnose", lambda: "")()
            self._checkpoint_last()
            raise
        except RunFileError as err:  # a full disk: one line naming the file, what is kept, how to go on
            self._checkpoint_last(quiet=True)
            error = f"{err}; {self._kept()}"
            raise RunFileError(err.path, f"{err.cause}; {self._kept()}") from None
        except BaseException as err:
            error = f"{type(err).__name__}: {err}" + getattr(self.executor, "diagnose", lambda: "")()
            self._checkpoint_last()
            raise
        finally:
            self.progress.close()
            self.writer.close()
            self.devices.close()
            summary = self.summary(status, error, self._wall())
            if status in FINISHED:  # the proof that the dir's files are this run's (runtime/rundir.py)
                summary["files"] = rundir.file_proof(self.dir)
            self._write_summary(summary, raise_error=status in FINISHED)
            self._leave(status)  # private/ deleted, or named on stderr (runtime/snapshots.py)
            for cb in self.callbacks:
                cb.close(summary)
        return summary

    def _wall(self) -> float:
        return self.wall_before + time.monotonic() - self._t0

    def _record(self, ev: dict) -> None:
        self.counts[ev["event"]] += 1
        if ev["event"] == "drop":
            self.counts["drop_" + ev.get("cause", "offline")] += 1
        self.writer.event(ev)

    def _submit(self, ev: dict, versions: dict) -> None:
        self.executor.submit(JobSpec.of(ev, self.lookahead), self.controls.download(ev["version"], versions))

    def _dispatch(self, ev: dict, versions: dict, refs: Counter) -> None:
        """Hand a started job to the executor, with the epochs it will really train."""
        if self.lookahead.final_epochs(ev["job"]) is None:  # never aggregated within the run: no need to train it
            return
        refs[ev["version"]] += 1
        self._submit(ev, versions)

    # ---- the loop -----------------------------------------------------------------------
    def _loop(self, state: dict | None) -> torch.Tensor:
        """Run (or continue) the schedule; return the final global model."""
        cfg = self.cfg
        self.lookahead = self.exp.schedule()
        if state is None:
            versions = {0: self.exp.initial_flat()}
            refs = Counter({0: 1})  # version -> jobs (and the current model) that still need it
            version, now = 0, 0.0
            # the first jobs go out before the initial model's evaluation, so workers start at once
            starts = self.lookahead.take_while(_is_start)
            for st in starts:
                self._dispatch(st, versions, refs)
            self._evaluate(0, 0.0, versions[0], None)
            for st in starts:
                self._record(st)
            if self.diverged_stop:  # an untrained model with a non-finite loss
                return versions[0]
        else:
            versions, refs, version, now = self._restore(state)
            for st in checkpoint.replay(self.lookahead, version):  # the jobs in flight at the checkpoint
                self._submit(st, versions)
            print(f"seafl: resumed {self.dir} after aggregation {version} (virtual time {now:.1f}s)", file=sys.stderr)
        self._consistent(version, now, versions, refs)
        target, stall = cfg.run.target_accuracy, None
        for ev in self.lookahead:
            if ev["event"] == "start":  # device churn: a slot refilled between aggregations (after a drop or a wait)
                self._dispatch(ev, versions, refs)
                self._record(ev)
                continue
            if ev["event"] == "stall":  # no progress possible any more: recorded last, after the final eval
                stall = ev
                break
            if ev["event"] != "aggregate":  # the starts an aggregation makes come with it, below
                self._record(ev)
                continue
            now, new = ev["time"], self._aggregate(ev, version, versions)
            version = ev["version"]
            versions[version] = new
            refs[version] += 1
            for u in ev["updates"]:
                refs[u["base_version"]] -= 1
            refs[version - 1] -= 1
            for v in [v for v, n in refs.items() if n <= 0]:
                del refs[v], versions[v]
            self._record(ev)
            for cb in self.callbacks:
                cb.on_aggregate(ev)
            # the jobs this aggregation starts go out before we evaluate, so workers never wait on
            # an evaluation; their start events follow the eval event in the trace, as in time order
            starts = self.lookahead.take_while(_is_start)
            for st in starts:
                self._dispatch(st, versions, refs)
            self.hook.at("during_aggregate", version, self.writer.flush)
            if version % cfg.run.eval_every == 0:
                row = self._evaluate(version, now, new, ev)
                if (target is not None and self.metric.reached(row[self.metric.name], target)) or self.diverged_stop:
                    return new
            for st in starts:
                self._record(st)
            self._consistent(version, now, versions, refs)
        if self.rows[-1]["version"] != version:
            self._evaluate(version, now, versions[version], None)
        if stall is not None:
            self._record(stall)
            self.stalled = stall["reason"]
        return versions[version]
