"""The server: consumes the schedule, aggregates, evaluates, writes the run dir (rank 0 only).

The same loop serves the in-process runner and the distributed runtime; only the executor
(who trains a job) differs. For each scheduler event:
- start: look ahead for the epochs the job will really train, hand it to the executor,
- notify / finish: record,
- aggregate: collect the jobs' models, apply the rule of ``algorithm.name``, bump the
  version, evaluate, stop early at ``run.target_accuracy``.
"""
from __future__ import annotations

import math
import time
from collections import Counter

import torch

from seafl_dist.algo import BufferedUpdate, aggregate
from seafl_dist.config import dump_config
from seafl_dist.report import Progress, RunWriter, time_to_target, write_json
from seafl_dist.runtime.executor import JobSpec
from seafl_dist.train import evaluate


class Server:
    """Rank 0's loop. ``callbacks`` get ``on_aggregate(event)``, ``on_eval(row)`` and ``close(summary)``."""

    def __init__(self, exp, executor, out_dir, *, callbacks=(), progress: Progress | None = None,
                 partition_report: dict | None = None):
        self.exp, self.cfg, self.executor = exp, exp.cfg, executor
        self.partition_report = partition_report or exp.partition_report()
        self.writer = RunWriter(out_dir)
        self.callbacks = list(callbacks)
        lc = self.cfg.logging
        self.progress = progress or Progress(lc.progress, total=self.cfg.run.max_aggregations, every_s=lc.progress_every_s)
        self.eval_model = exp.new_model()
        self.parts = exp.flat_parts()  # params / float stats / integer counters of the flat vector
        self.rows: list[dict] = []
        self.counts: Counter = Counter()
        self.staleness: list[int] = []

    # ---- evaluation and metrics ---------------------------------------------------------
    def _evaluate(self, version: int, now: float, flat: torch.Tensor, agg: dict | None) -> dict:
        acc, loss = evaluate(self.eval_model, flat, self.exp.test.to(self.exp.device), device=self.exp.device,
                             precision=self.cfg.runtime.precision)
        self.writer.event({"event": "eval", "time": now, "version": version, "accuracy": acc, "loss": loss})
        self.counts["eval"] += 1
        st = [u["staleness"] for u in agg["updates"]] if agg else []
        row = {"version": version, "time": now, "accuracy": acc, "loss": loss, "updates": len(st),
               "mean_staleness": sum(st) / len(st) if st else 0.0, "max_staleness": max(st, default=0),
               "notifications": self.counts["notify"], "rejected": self.counts["rejected"]}
        self.writer.metrics(row)
        self.rows.append(row)
        self.progress.update(version, now, acc)
        for cb in self.callbacks:
            cb.on_eval(row)
        return row

    # ---- one aggregation ----------------------------------------------------------------
    def _aggregate(self, ev: dict, version: int, versions: dict) -> torch.Tensor:
        updates = [BufferedUpdate(device=u["device"], job=u["job"], flat=self.executor.result(u["job"]),
                                  n_samples=u["n_samples"], base_version=u["base_version"], epochs=u["epochs"])
                   for u in ev["updates"]]
        result = aggregate(self.cfg.algorithm, version, versions[version], updates, versions.__getitem__,
                           self.parts)
        for u, info in zip(ev["updates"], result.info):
            u.update(info)
            self.counts["rejected"] += bool(info.get("rejected"))
            self.staleness.append(u["staleness"])
        return result.new_global

    def run(self) -> dict:
        cfg, t0 = self.cfg, time.monotonic()
        (self.writer.dir / "config.yaml").write_text(dump_config(cfg))
        write_json(self.writer.dir / "partition.json", self.partition_report)
        status, error = "failed", None
        try:
            self._loop()
            # the normal end's goodbye to the workers; after a failure or an interrupt they may be
            # gone already, and waiting on them must not cost us the summary
            self.executor.close()
            status = "completed"
        except KeyboardInterrupt as err:
            status = "interrupted"
            error = f"interrupted ({err or 'Ctrl-C'})" + getattr(self.executor, "diagnose", lambda: "")()
            raise
        except BaseException as err:
            error = f"{type(err).__name__}: {err}" + getattr(self.executor, "diagnose", lambda: "")()
            raise
        finally:
            self.progress.close()
            self.writer.close()
            summary = self.summary(status, error, time.monotonic() - t0)
            write_json(self.writer.dir / "summary.json", summary)
            for cb in self.callbacks:
                cb.close(summary)
        return summary

    def _record(self, ev: dict) -> None:
        self.counts[ev["event"]] += 1
        self.writer.event(ev)

    def _dispatch(self, ev: dict, versions: dict, refs: Counter) -> None:
        """Hand a started job to the executor, with the epochs it will really train."""
        epochs = self.lookahead.final_epochs(ev["job"])
        if epochs is None:  # never aggregated within the run: no need to train it
            return
        refs[ev["version"]] += 1
        self.executor.submit(JobSpec(ev["job"], ev["device"], ev["version"], epochs,
                                     self.lookahead.finish_time(ev["job"])), versions[ev["version"]])

    def _loop(self) -> None:
        cfg = self.cfg
        versions = {0: self.exp.initial_flat()}
        refs = Counter({0: 1})  # version -> jobs (and the current model) that still need it
        version, now, last_eval = 0, 0.0, self._evaluate(0, 0.0, versions[0], None)
        target = cfg.run.target_accuracy
        self.lookahead = self.exp.schedule()
        for ev in self.lookahead:
            if ev["event"] == "start":  # only the initial jobs; later ones are taken with their aggregation
                self._dispatch(ev, versions, refs)
                self._record(ev)
                continue
            if ev["event"] != "aggregate":
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
            starts = self.lookahead.take_while(lambda e: e["event"] == "start")
            for st in starts:
                self._dispatch(st, versions, refs)
            if version % cfg.run.eval_every == 0:
                last_eval = self._evaluate(version, now, new, ev)
                if target is not None and last_eval["accuracy"] >= target:
                    return
            for st in starts:
                self._record(st)
        if last_eval["version"] != version:
            self._evaluate(version, now, versions[version], None)

    # ---- summary ------------------------------------------------------------------------
    def summary(self, status: str, error: str | None, wall: float) -> dict:
        rows = self.rows
        targets = sorted(set(self.cfg.run.targets) | ({self.cfg.run.target_accuracy} - {None}))
        last = rows[-1] if rows else {}
        return {
            "status": status, "error": error, "name": self.cfg.name, "algorithm": self.cfg.algorithm.name,
            "final_accuracy": last.get("accuracy"), "final_loss": last.get("loss"),
            "best_accuracy": max((r["accuracy"] for r in rows), default=None),
            "aggregations": self.counts["aggregate"], "virtual_time": last.get("time"),
            "time_to_target": {str(t): time_to_target(rows, t) for t in targets},
            "mean_staleness": sum(self.staleness) / len(self.staleness) if self.staleness else 0.0,
            "max_staleness": max(self.staleness, default=0),
            "notifications": self.counts["notify"], "rejected_updates": self.counts["rejected"],
            "events": {k: self.counts[k] for k in ("start", "notify", "finish", "aggregate", "eval")},
            "wall_time_s": wall,
        }


def format_summary(summary: dict) -> str:
    """The human summary the CLI prints at the end of a run."""
    ttt = ", ".join(f"{float(t):.0%}: " + ("never" if v is None or math.isinf(v) else f"{v:.1f}s")
                    for t, v in summary["time_to_target"].items())
    ev = summary["events"]
    acc = summary["final_accuracy"]
    return "\n".join([
        f"run {summary['name']} ({summary['algorithm']}): {summary['status']}",
        f"  final accuracy {acc:.4f}, best {summary['best_accuracy']:.4f}" if acc is not None else "  no evaluation",
        f"  virtual time {summary['virtual_time'] or 0:.1f}s over {summary['aggregations']} aggregations,"
        f" real time {summary['wall_time_s']:.1f}s",
        f"  time to target accuracy: {ttt}",
        f"  events: {ev['start']} start, {ev['finish']} finish, {ev['notify']} notify, "
        f"{ev['aggregate']} aggregate, {ev['eval']} eval; mean staleness {summary['mean_staleness']:.2f},"
        f" rejected updates {summary['rejected_updates']}",
    ])
