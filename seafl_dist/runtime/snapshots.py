"""The checkpoint half of the server (runtime/server.py): the consistent state at the end of each
aggregation, written as a checkpoint when one is due (runtime/checkpoint.py) or on the way out,
and read back on resume; the files a run writes last (model.pt, summary.json); and how it leaves the run dir's
server-private part (runtime/rundir.py private_dir): deleted at a normal end, named on stderr otherwise. A mixin of
:class:`~seafl_dist.runtime.server.Server`, whose attributes (``cfg``, ``dir``, ``writer``, ``devices``,
``rows``, ``staleness``, ``counts``, ``hook``...) it uses.
"""
from __future__ import annotations

import sys
import time
from collections import Counter

import torch

from seafl_dist.report import write_json
from seafl_dist.report.sinks import FINISHED, RunFileError
from seafl_dist.runtime import checkpoint, residuals, rundir
from seafl_dist.algo.memory import frozen, to_cpu
from seafl_dist.privacy.record_accountant import ledger_of
from seafl_dist.runtime.summary import build_summary
from seafl_dist.train.dp_sgd import job_steps, summary as dp_sgd_summary
from seafl_dist.settings import ConfigError, dump_config
from seafl_dist.train import load_flat


class Snapshots:
    """Checkpoints of a Server: remember, write and restore the state at the end of an aggregation."""

    def _with_records(self, exp, callbacks) -> list:
        """The server's callbacks, the run's DP-SGD ledger last (``self.records``, privacy/record_accountant.py): it
        charges each arrived job's steps at its aggregate event, is snapshotted by its length and checkpointed."""
        self.records = ledger_of(exp, job_steps)
        return [*callbacks, self.records] if self.records.active else list(callbacks)

    def _consistent(self, version: int, now: float, versions: dict, refs: Counter) -> None:
        """The end of an aggregation: flush, remember this state, checkpoint it if one is due."""
        events_bytes, metrics_bytes = self.writer.flush()
        self._snap = {"version": version, "time": now, "versions": dict(versions), "refs": dict(refs),
                      "n_rows": len(self.rows), "n_staleness": len(self.staleness), "counts": dict(self.counts),
                      "update_norms": self.watch.history.to_list(), "server_opt": self.server_opt.state,
                      "rule_state": self.memory.state,  # never mutated by the rule: a reference is a snapshot
                      "defense_state": self.memory.defense_state,  # Zeno++'s v (seafl_dist/defenses/), replaced whole
                      "feedback": self._feedback().state() if self._feedback() is not None else None,
                      "controls": self._controls_state(),  # SCAFFOLD's c_k in this process (runtime/controls.py)
                      "events_bytes": events_bytes, "metrics_bytes": metrics_bytes, "privacy": self.privacy.state(),
                      "devices": self.devices.flush(),  # device evaluation's files (runtime/device_eval.py)
                      "dp_sgd_steps": self.records.mark()}  # the DP-SGD ledger's length (privacy/record_accountant.py)
        run = self.cfg.run
        due = (run.checkpoint_every is not None and version > 0 and version % run.checkpoint_every == 0) or \
              (run.checkpoint_every_s is not None and time.monotonic() - self._last_save >= run.checkpoint_every_s)
        if due:
            self._write_checkpoint()
        self.hook.at("after_aggregate", version, self.writer.flush)

    def _write_checkpoint(self, last: bool = False) -> None:
        snap = self._snap
        if snap is None or snap["version"] == self._saved_version:
            return
        on_workers = getattr(self.executor, "residuals_on", False)  # error feedback under torchrun
        if last and on_workers:  # the workers may be gone: the last complete checkpoint stands (runtime/residuals.py)
            return
        try:  # checked throughout here (algo/memory.py); a value no checkpoint holds is refused in one line
            rule_state = self.memory.of_snapshot(snap["rule_state"]) if self.memory.stateful else None
        except (ConfigError, ValueError):
            self._snap = None  # so not tried again on the way out: its line is said once; an earlier checkpoint stands
            raise
        self.writer.flush(sync=True)  # the recorded lengths must be on disk before the checkpoint is
        self.devices.flush(sync=True)
        files = self.executor.save_residuals(snap["version"], self.dir) if on_workers else None
        checkpoint.save(self.dir, {
            "config": dump_config(self.cfg), "version": snap["version"], "time": snap["time"],
            "versions": {int(v): t.detach().cpu() for v, t in snap["versions"].items()},
            "refs": {int(v): int(n) for v, n in snap["refs"].items() if n > 0},
            "rows": self.rows[:snap["n_rows"]], "staleness": self.staleness[:snap["n_staleness"]],
            "counts": dict(snap["counts"]), "events_bytes": snap["events_bytes"],
            "metrics_bytes": snap["metrics_bytes"], "wall_s": self._wall(), "update_norms": snap["update_norms"],
            **({"profile_sha256": self.profile_sha256} if self.profile_sha256 else {}),
            **({"server_opt": snap["server_opt"].to_dict()} if self.server_opt.active else {}),
            **({"rule_state": rule_state} if rule_state is not None else {}),
            **({"defense_state": to_cpu("algorithm.defense", snap["defense_state"])} if snap["defense_state"] else {}),
            **({"feedback": snap["feedback"]} if snap["feedback"] is not None else {}), **snap["devices"],
            **({"controls": snap["controls"]} if snap.get("controls") is not None else {}),
            **({"residuals": files} if files is not None else {}),  # the workers' files (runtime/residuals.py)
            **({"dp_sgd_steps": self.records.state(snap["dp_sgd_steps"])} if self.records.active else {}),
            **({"privacy": snap["privacy"]} if snap["privacy"] is not None else {})})  # m_k under DP
        residuals.retain(self.dir, files)  # the workers' files go with their checkpoints
        self.privacy.checkpointed(snap["version"])  # secure noise's write-ahead record: what is before it goes
        self._saved_version, self._last_save = snap["version"], time.monotonic()

    def _checkpoint_last(self, quiet: bool = False) -> None:
        """On the way out: keep the last consistent state; a failure here must not hide the first one."""
        try:
            self._write_checkpoint(last=True)
        except BaseException as err:
            if not quiet:
                print(f"seafl: could not write a checkpoint: {type(err).__name__}: {err}", file=sys.stderr)

    def _restore(self, state: dict):
        self.rows, self.staleness = list(state["rows"]), list(state["staleness"])
        self.counts = Counter(state["counts"])
        self.wall_before, self._saved_version = float(state["wall_s"]), state["version"]
        self.watch.restore(state, self.rows)  # the guard's norms; whether (and where) the run diverged
        self.server_opt.load_state_dict(state.get("server_opt"))  # m and v of the server optimizer, if any
        self.memory.load_state_dict(state.get("rule_state"))  # a stateful rule's (algo/memory.py)
        self.memory.defense_state = frozen(state.get("defense_state"))  # a defense's own (Zeno++'s v)
        self.devices.restore(state)  # the last device evaluation's summary
        self._restore_feedback(state)
        if self.privacy.active:  # the inclusion counts m_k (privacy/mechanism.py)
            self.privacy.load(state.get("privacy"))
        if self.records.active:  # each device's DP-SGD steps so far (privacy/record_accountant.py)
            self.records.load(state.get("dp_sgd_steps"))
        return dict(state["versions"]), Counter(state["refs"]), state["version"], state["time"]

    def _feedback(self):
        """The devices' error-feedback residuals, where they live in this process (codecs/feedback.py), else None."""
        return getattr(self.executor, "feedback", None)

    def _restore_feedback(self, state: dict) -> None:
        """Error feedback in one process: the residuals the checkpoint holds, inline or in the files of the workers
        that wrote it (runtime/residuals.py; checkpoint.load refused, before anything was written, a checkpoint
        without them). Under torchrun the workers load their own (runtime/distributed.py)."""
        if self.cfg.compression.error_feedback and self._feedback() is not None:
            self._feedback().load(state["feedback"] if "feedback" in state else residuals.gather(self.resume))
        if self._controls_state() is not None:  # SCAFFOLD's c_k, inline (one process) or in the workers' files
            self._feedback().load_controls(state["controls"] if "controls" in state else
                                           residuals.gather(self.resume, part="controls"))

    def _controls_state(self) -> dict | None:
        """SCAFFOLD's devices' c_k where they live in this process (codecs/feedback.py's controls part), else None."""
        fb = self._feedback()
        return fb.controls_state() if fb is not None and self.cfg.algorithm.name == "scaffold" else None

    def _kept(self) -> str:
        if self._saved_version is None:
            return "no checkpoint was written yet: make room (or fix the cause) and rerun the same command"
        return (f"{rundir.PRIVATE}/checkpoint-{self._saved_version:08d}.pt is kept: make room (or fix the cause) and rerun the "
                f"same command to resume from aggregation {self._saved_version}")

    def _leave(self, status: str) -> None:
        """The run's end: a finished run deletes everything server-private (private/ whole); an interrupted or
        failed one keeps its checkpoints, and one stderr line says that the run dir holds server-private files and
        how to publish the run without them (``seafl release``)."""
        if status in FINISHED:
            checkpoint.remove_all(self.dir)
        elif note := rundir.private_note(self.dir):
            print(note, file=sys.stderr)

    # ---- the files written last -----------------------------------------------------------
    def summary(self, status: str, error: str | None, wall: float) -> dict:
        """summary.json's content: the run's figures (runtime/summary.py), device evaluation's, privacy's."""
        return {**build_summary(self.cfg, self.rows, self.counts, self.staleness, status=status, error=error, wall=wall,
                                churn=self.churn, profile_sha256=self.profile_sha256, stalled=self.stalled,
                                diverged_at=self.watch.diverged_at()), **self.devices.summary(), **self.memory.summary(),
                **self.privacy.summary(),  # under DP: ε, δ, z, C, the largest m (privacy/mechanism.py)
                **self.exp.threats.summary(self.rows),  # the malicious devices and the attack (threats/)
                **dp_sgd_summary(self.exp.dp_sgd, self.exp.dp_fixes, self.records.summary())}  # DP-SGD's (train/)

    def _save_model(self, flat: torch.Tensor) -> None:
        """model.pt: the LightningModule's state_dict (load it into build_model(...) of the same config)."""
        model = self.exp.new_model()
        load_flat(model, flat.detach().cpu())
        checkpoint.atomic_save(model.state_dict(), self.dir / "model.pt")

    def _write_summary(self, summary: dict, *, raise_error: bool) -> None:
        """summary.json; if the disk is full, a failed run's own error is the one reported."""
        try:
            write_json(self.dir / "summary.json", summary)
        except RunFileError:
            if raise_error:
                raise
