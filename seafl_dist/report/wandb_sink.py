"""Weights & Biases tracking of one run (rank 0 only; ``wandb`` is imported only when enabled).

    logging:
      wandb: {enabled: true, mode: offline, project: seafl, entity: null, group: null, tags: []}

    seafl run configs/quickstart.yaml logging.wandb.enabled=true logging.wandb.mode=offline

What a run logs:
- the resolved config;
- every evaluation: ``eval/accuracy``, ``eval/loss``, ``eval/best_accuracy``, ``eval/notifications``;
- every aggregation: ``agg/updates``, ``agg/mean_staleness``, ``agg/max_staleness``,
  ``agg/partial_updates`` (SEAFL² updates with fewer than E epochs), ``agg/max_weight``;
- every row also carries ``virtual_time`` and ``version``: virtual time is the default x-axis
  (``define_metric``), and ``version`` can be picked as the x-axis of any panel;
- at the end: the summary (``final_accuracy``, ``best_accuracy``, ``time_to_target/<acc>``
  with null for never, ...), the plots ``accuracy_vs_time`` and
  ``timeline`` (written into the run dir with its report.md), and exit code 1 if the run failed.

Offline (``mode: offline``, no API key or network needed): the run is stored under
``<run dir>/wandb/offline-run-*`` and ``<run dir>/wandb_sync.txt`` gives the ``wandb sync``
command that uploads it later. ``mode: online`` that cannot reach W&B (no key, no network)
falls back to offline with a warning: tracking never kills a long job. A sweep puts its runs
in one W&B group (``logging.wandb.group`` = the sweep's name unless set).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path


def make_callbacks(cfg, out_dir) -> list:
    """Server callbacks for ``cfg.logging.wandb``: empty unless enabled and not ``disabled``."""
    w = cfg.logging.wandb
    if not w.enabled or w.mode == "disabled":
        return []
    return [WandbSink(cfg, out_dir)]


def _warn(msg: str) -> None:
    print(f"seafl: warning: {msg}", file=sys.stderr)


class WandbSink:
    """Server callback: ``on_eval(row)``, ``on_aggregate(event)``, ``close(summary)``."""

    def __init__(self, cfg, out_dir):
        try:
            import wandb
        except ImportError as err:
            raise RuntimeError("logging.wandb.enabled is true but the wandb package is not installed; "
                               "pip install wandb, or set logging.wandb.enabled=false") from err
        self.wandb, self.cfg, self.dir = wandb, cfg, Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.best = -math.inf
        w = cfg.logging.wandb
        kwargs = dict(project=w.project, entity=w.entity, group=w.group, tags=list(w.tags) or None, name=cfg.name,
                      config=cfg.to_dict(), dir=str(self.dir), job_type="seafl-run",
                      settings=wandb.Settings(console="off", silent=True))
        try:
            self.run = wandb.init(mode=w.mode, **kwargs)
        except Exception as err:  # online without key or network
            if w.mode != "online":
                raise
            _warn(f"W&B online failed ({type(err).__name__}: {err}); logging offline instead")
            self.run = wandb.init(mode="offline", **kwargs)
        self.offline = self.run.settings.mode == "offline" or bool(getattr(self.run, "offline", False))
        self.run.define_metric("virtual_time")
        self.run.define_metric("version")
        for prefix in ("eval/*", "agg/*"):
            self.run.define_metric(prefix, step_metric="virtual_time")
        self.run.define_metric("eval/accuracy", step_metric="virtual_time", summary="max")
        self._write_note()

    def _write_note(self) -> None:
        if self.offline:
            sync_dir = Path(self.run.settings.sync_dir).resolve()
            text = ("This run was logged to Weights & Biases offline. Upload it (needs `wandb login`) with:\n"
                    f"  wandb sync {sync_dir}\n")
        else:
            text = f"W&B run: {self.run.url}\n"
        (self.dir / "wandb_sync.txt").write_text(text)

    def on_eval(self, row: dict) -> None:
        self.best = max(self.best, row["accuracy"])
        self.run.log({"virtual_time": row["time"], "version": row["version"], "eval/accuracy": row["accuracy"],
                      "eval/loss": row["loss"], "eval/best_accuracy": self.best,
                      "eval/notifications": row["notifications"], "eval/rejected": row["rejected"]})

    def on_aggregate(self, event: dict) -> None:
        ups = event["updates"]
        st = [u["staleness"] for u in ups]
        epochs = self.cfg.train.epochs
        self.run.log({"virtual_time": event["time"], "version": event["version"], "agg/updates": len(ups),
                      "agg/mean_staleness": sum(st) / len(st) if st else 0.0, "agg/max_staleness": max(st, default=0),
                      "agg/partial_updates": sum(1 for u in ups if u.get("epochs", epochs) < epochs),
                      "agg/max_weight": max((u.get("weight") or 0.0 for u in ups), default=0.0)})

    def close(self, summary: dict) -> None:
        try:
            self._close(summary)
        except Exception as err:  # never mask the run's own outcome
            _warn(f"W&B close failed: {type(err).__name__}: {err}")

    def _close(self, summary: dict) -> None:
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
        self.run.finish(exit_code=0 if summary.get("status") == "completed" else 1)
        self._write_note()
