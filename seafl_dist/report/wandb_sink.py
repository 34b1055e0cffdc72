"""Weights & Biases tracking of one run (rank 0 only; ``wandb`` is imported only when enabled).

    logging:
      wandb: {enabled: true, mode: offline, project: seafl, entity: null, group: null, tags: []}

    seafl run configs/quickstart.yaml logging.wandb.enabled=true logging.wandb.mode=offline

What a run logs:
- the resolved config;
- every evaluation: ``eval/accuracy``, ``eval/loss`` (or what a module's own ``test_step`` logs, as
  ``eval/<name>``), ``eval/best_<run.target_metric>``, ``eval/notifications``;
- every aggregation: ``agg/updates``, ``agg/mean_staleness``, ``agg/max_staleness``,
  ``agg/partial_updates`` (SEAFL² updates with fewer than E epochs), ``agg/max_weight``;
- every device evaluation (``run.device_eval_every``, docs/device_eval.md): ``device_eval/<stat>`` of the target
  metric (``weighted_mean``, ``mean``, ``std``, ``p10``, ``p50``, ``p90``, ``worst10_mean``, ``devices``,
  ``without_holdout``), ``device_eval/<metric>_<stat>`` of the others, and ``device_eval/distribution``, a
  histogram of the devices' finite values of the target metric (those ``devices`` counts: no device without
  held-out rows, no NaN or ±inf of a diverged one; none at all when no value is finite);
- every row also carries ``virtual_time`` and ``version``: virtual time is the default x-axis
  (``define_metric``); W&B's step is the version, so an aggregation and its evaluation are one
  history row;
- at the end: the summary (``final_accuracy``, ``best_accuracy``, ``time_to_target/<acc>``
  with null for never, ...), the plots ``accuracy_vs_time`` and
  ``timeline`` (written into the run dir with its report.md), and exit code 1 if the run failed.

Under DP (``privacy.enabled`` without ``privacy.diagnostics``) W&B starts only when the run has ended: W&B stamps
each row with the real time it arrives (``_timestamp``, ``_runtime``) and samples the machine on a timer, and the
real time carries the devices' data (docs/privacy.md, "No wall-clock channel"). The rows are held here and logged,
the same rows as live, after the server's last write, with W&B's system statistics and metadata off
(``x_disable_stats``, ``x_disable_meta``; the console is never captured); offline, ``wandb sync`` uploads them later.

Resume: the W&B run id is written to ``<run dir>/wandb_run.json`` before anything is logged. A
resumed run (``--resume``, a rerun of the same command, a requeued job, torchrun's restart)
continues that id (``wandb.init(id=..., resume="allow")``) and logs each version once: versions
W&B already has are skipped (online: below the resumed run's starting step; offline: found in
the earlier ``offline-run-*`` folders of the id), and versions a killed process logged but W&B
never wrote (it buffers up to 15 s) are logged again from ``events.jsonl`` and ``metrics.csv``.
A run that starts over in its dir gets a new id.

Offline (``mode: offline``, no API key or network needed): the run is stored under
``<run dir>/wandb/offline-run-*`` (one folder per process of a resumed run) and
``<run dir>/wandb_sync.txt`` gives the ``wandb sync`` command that uploads it later (all the
folders, oldest first, as one run). ``mode: online`` that cannot reach W&B (no key, no network)
falls back to offline with a warning: tracking never kills a long job. A sweep puts its runs
in one W&B group (``logging.wandb.group`` = the sweep's name unless set).
"""
from __future__ import annotations

import json
import math
import secrets
import string
import sys
from pathlib import Path

from seafl_dist.report import wandb_files
from seafl_dist.report.device_eval import device_rows_before
from seafl_dist.report.metric import Metric
from seafl_dist.report.sinks import FINISHED, METRIC_COLUMNS, read_metrics, write_json
from seafl_dist.report.trainlog import aggregation_values

LEDGER = "wandb_run.json"


JOB_TYPE_CHARS = 64  # W&B's longest job type


def make_callbacks(cfg, out_dir, resume=None) -> list:
    """Server callbacks for ``cfg.logging.wandb``: empty unless enabled and not ``disabled``.
    ``resume``: the checkpoint the run continues from (then the W&B run continues too)."""
    w = cfg.logging.wandb
    if not w.enabled or w.mode == "disabled":
        return []
    return [WandbSink(cfg, out_dir, resumed=resume is not None)]


ROW_KEYS = set(METRIC_COLUMNS) | {"drops"}  # a metric row's own columns; any other is a module's metric
PRIVACY_KEYS = ("epsilon", "noise_std", "max_inclusions")  # what W&B logs of an aggregate event's privacy (docs/privacy.md)


def _warn(msg: str) -> None:
    print(f"seafl: warning: {msg}", file=sys.stderr)


class WandbSink:
    """Server callback: ``on_eval(row)``, ``on_aggregate(event)``, ``close(summary)``."""

    def __init__(self, cfg, out_dir, resumed: bool = False):
        try:
            import wandb
        except ImportError as err:
            raise RuntimeError("logging.wandb.enabled is true but the wandb package is not installed; "
                               "pip install wandb, or set logging.wandb.enabled=false") from err
        self.wandb, self.cfg, self.dir = wandb, cfg, Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metric = Metric.of(cfg.run)  # run.target_metric: its best so far as eval/best_<name>
        self.best = None
        w = cfg.logging.wandb
        run_id = (_read_ledger(self.dir) if resumed else None) or _new_id()
        write_json(self.dir / LEDGER, {"id": run_id, "project": w.project, "entity": w.entity})  # before any log
        self.earlier = wandb_files.offline_files(self.dir / "wandb", run_id)  # before init adds this process's own
        self.resumed, self.run_id = resumed, run_id
        self.catch_up = resumed
        self.pending: tuple[int, dict] | None = None  # (version, values) of an aggregation awaiting its evaluation
        self.device_pending: tuple[int, dict] | None = None  # a device evaluation's values awaiting its version's row
        # under DP (without privacy.diagnostics) W&B starts only once the run has ended: it stamps each row with
        # the real time it arrives (_timestamp, _runtime) and samples the machine on a timer, so every row waits
        # here until close() (docs/privacy.md, "No wall-clock channel")
        self.held: list[tuple[int, dict]] | None = [] if cfg.privacy.withheld else None
        self.run = None
        if self.held is None:
            self._start()

    def _start(self) -> None:
        """``wandb.init`` (offline instead when online fails) and the metrics' axes."""
        wandb, cfg, w = self.wandb, self.cfg, self.cfg.logging.wandb
        quiet = {"x_disable_stats": True, "x_disable_meta": True} if self.held is not None else {}  # no timer, no host
        kwargs = dict(project=w.project, entity=w.entity, group=w.group, tags=list(w.tags) or None, name=cfg.name,
                      config=cfg.to_dict(), dir=str(self.dir), job_type=(w.job_type or "seafl-run")[:JOB_TYPE_CHARS],
                      id=self.run_id, resume="allow", settings=wandb.Settings(console="off", silent=True, **quiet))
        try:
            self.run = wandb.init(mode=w.mode, **kwargs)
        except Exception as err:  # online without key or network
            if w.mode != "online":
                raise
            _warn(f"W&B online failed ({type(err).__name__}: {err}); logging offline instead")
            self.run = wandb.init(mode="offline", **kwargs)
        self.offline = self.run.settings.mode == "offline" or bool(getattr(self.run, "offline", False))
        # versions W&B already holds: they are skipped, the ones after them (re)logged from the run files
        self.logged_through = self._logged_through(self.earlier) if self.resumed else -1
        self.run.define_metric("virtual_time")
        self.run.define_metric("version")
        for prefix in ("eval/*", "agg/*", "train/*") + (("device_eval/*",) if cfg.run.device_eval_every else ()):
            self.run.define_metric(prefix, step_metric="virtual_time")
        self.run.define_metric(f"eval/{self.metric.name}", step_metric="virtual_time", summary=self.metric.mode)
        self._write_note()

    def _logged_through(self, earlier: list[Path]) -> int:
        if not self.offline:
            return int(self.run.starting_step) - 1  # resume="allow": W&B continues after its last step
        try:
            return wandb_files.last_step(earlier)
        except Exception as err:  # an unreadable earlier file must not stop the run
            _warn(f"could not read the earlier W&B offline files of this run ({type(err).__name__}: {err}); "
                  f"versions logged before the restart may appear twice")
            return -1

    def _write_note(self) -> None:
        if self.offline:
            dirs = [f.parent.resolve() for f in wandb_files.offline_files(self.dir / "wandb", self.run.id)]
            current = Path(self.run.settings.sync_dir).resolve()
            dirs = dirs + [current] * (current not in dirs)
            text = ("This run was logged to Weights & Biases offline. Upload it (needs `wandb login`) with:\n"
                    f"  wandb sync {' '.join(map(str, dirs))}\n")
        else:
            text = f"W&B run: {self.run.url}\n"
        (self.dir / "wandb_sync.txt").write_text(text)

    # ---- rows: one W&B step per version, logged whole in one call ------------------------
    # An aggregation's row waits for its evaluation (or the next aggregation), so W&B never holds
    # half a version that a resumed run would then skip.
    def _ready(self, version: int) -> None:
        if self.catch_up:
            self.catch_up = False
            self._catch_up(version)

    def _log(self, version: int, values: dict) -> None:
        if self.run is None:  # under DP: held until the run has ended
            self.held.append((version, values))
        elif version > self.logged_through:  # else W&B has it: a resumed run re-logs from its checkpoint
            self.run.log(values, step=version)

    def _flush_pending(self) -> None:
        if self.pending is not None:
            self._log(*self.pending)
            self.pending = None

    def _catch_up(self, first: int) -> None:
        """A resumed run's first row is ``first``: log the rows before it that W&B lacks (a killed
        process loses what W&B had not yet written), and restore the best accuracy so far."""
        evals = [r for r in _metric_rows(self.dir / "metrics.csv") if r["version"] < first]
        aggs = [e for e in _events(self.dir / "events.jsonl") if e.get("event") == "aggregate" and e["version"] < first]
        rows: dict[int, dict] = {}
        for e in aggs:
            rows.setdefault(e["version"], {}).update(self._agg_values(e))
        for r in evals:  # in version order, so eval/best_accuracy accumulates as it did
            rows.setdefault(r["version"], {}).update(self._eval_values(r))
        for version, values in device_rows_before(self.dir, self.metric.name, first).items():
            rows.setdefault(version, {}).update(self._device_values(*values))
        for version in sorted(rows):
            self._log(version, rows[version])

    def _eval_values(self, row: dict) -> dict:
        self.best = self.metric.best([self.best, row.get(self.metric.name)])
        own = {f"eval/{k}": v for k, v in row.items() if k not in ROW_KEYS}  # a module's own test_step metrics
        return {"virtual_time": row["time"], "version": row["version"],
                **({"eval/accuracy": row["accuracy"], "eval/loss": row["loss"]} if row["accuracy"] is not None else {}),
                **own, f"eval/best_{self.metric.name}": self.best,
                "eval/notifications": row["notifications"], "eval/rejected": row["rejected"],
                **({"eval/drops": row["drops"]} if "drops" in row else {})}  # device churn only (docs/devices.md)

    def _agg_values(self, event: dict) -> dict:
        ups = event["updates"]
        st = [u["staleness"] for u in ups]
        epochs = self.cfg.train.epochs
        return {"virtual_time": event["time"], "version": event["version"], "agg/updates": len(ups),
                "agg/mean_staleness": sum(st) / len(st) if st else 0.0, "agg/max_staleness": max(st, default=0),
                "agg/partial_updates": sum(1 for u in ups if u.get("epochs", epochs) < epochs),
                **({"agg/max_weight": max((u.get("weight") or 0.0 for u in ups), default=0.0)}
                   if all("weight" in u for u in ups) else {}),  # SEAFL's under DP: withheld (docs/privacy.md)
                **{f"train/{name}": value for name, value in aggregation_values(event).items()},
                **{f"privacy/{k}": event["privacy"][k] for k in PRIVACY_KEYS if k in event.get("privacy", {})}}

    def _device_values(self, time: float, stats: dict, distribution) -> dict:
        out = {"virtual_time": time}
        for name, st in stats.items():
            tag = "device_eval/" if name == self.metric.name else f"device_eval/{name}_"
            out.update({f"{tag}{k}": v for k, v in st.items() if k not in ("non_finite",) and not k.startswith("hold")})
        finite = [float(v) for v in distribution if v is not None and math.isfinite(v)]
        if finite:  # wandb.Histogram raises on a NaN or ±inf (a diverged device's loss): the devices counted only
            out["device_eval/distribution"] = self.wandb.Histogram(finite)
        return out

    def on_device_eval(self, version: int, time: float, stats: dict, distribution) -> None:
        """A device evaluation (runtime/device_eval.py): logged with its version's row (or at the end, for the final
        one, which comes after its central evaluation)."""
        self._flush_device()  # one left from a version that had no row after it
        self.device_pending = (version, {"version": version, **self._device_values(time, stats, distribution)})

    def _flush_device(self) -> None:
        if self.device_pending is not None:
            self._log(*self.device_pending)
            self.device_pending = None

    def on_eval(self, row: dict) -> None:
        version = row["version"]
        self._ready(version)
        values = self._eval_values(row)
        if self.pending is not None and self.pending[0] == version:
            values = {**self.pending[1], **values}
            self.pending = None
        if self.device_pending is not None and self.device_pending[0] == version:
            values = {**self.device_pending[1], **values}
            self.device_pending = None
        self._flush_pending()
        self._log(version, values)

    def on_aggregate(self, event: dict) -> None:
        self._ready(event["version"])
        self._flush_pending()  # the previous version had no evaluation (run.eval_every > 1)
        self.pending = (event["version"], self._agg_values(event))

    def close(self, summary: dict) -> None:
        try:
            self._close(summary)
        except Exception as err:  # never mask the run's own outcome
            _warn(f"W&B close failed: {type(err).__name__}: {err}")

    def _close(self, summary: dict) -> None:
        self._ready(math.inf)  # a resumed run that ended before logging a row of its own
        if summary.get("status") in FINISHED:
            self._flush_pending()
            self._flush_device()
        # else the run resumes from a checkpoint at or before the pending version, and logs it then
        if self.run is None:  # under DP: W&B starts now, after the server's last write, and gets every row at once
            self._start()
            for row in self.held:
                self._log(*row)
        flat = {}
        for k, v in summary.items():
            if isinstance(v, dict):
                flat.update({f"{k}/{k2}": v2 for k2, v2 in v.items()})
            else:
                flat[k] = v
        self.run.summary.update({k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                 for k, v in flat.items()})
        try:
            from seafl_dist.report.build import write_report
            files = write_report([self.dir], self.dir)["files"]
            self.run.log({f"plots/{Path(name).stem}": self.wandb.Image(str(path))
                          for name, path in files.items() if name.endswith(".png")})
        except Exception as err:
            _warn(f"could not log the plots to W&B: {type(err).__name__}: {err}")
        self.run.finish(exit_code=0 if summary.get("status") in FINISHED else 1)
        self._write_note()


def _new_id() -> str:
    """A W&B run id as W&B makes them (8 of [a-z0-9])."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _read_ledger(run_dir: Path) -> str | None:
    try:
        return str(json.loads((run_dir / LEDGER).read_text())["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no W&B run yet (W&B first enabled on resume) or an unreadable file: a new id


def _metric_rows(path: Path) -> list[dict]:
    """metrics.csv's rows with their integer columns as ints (as the server hands them over)."""
    try:
        rows = read_metrics(path)
    except (OSError, ValueError):
        return []
    return [{**r, **{k: int(r[k]) for k in ("notifications", "rejected", "updates", "drops") if r.get(k) is not None}}
            for r in rows if r.get("time") is not None]


def _events(path: Path) -> list[dict]:
    """events.jsonl's whole lines (the last one may be half-written while the run goes on)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines(keepends=True):
        if line.endswith("\n"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out

