"""Replay an event trace and list every way it breaks the server loop's rules or the trace schema.

    from seafl_dist.report.trace import check_run, check_trace
    problems = check_run("runs/quickstart-20250101-120000")   # reads config.yaml + events.jsonl
    problems = check_trace(events, concurrency=10, buffer_size=5, staleness_limit=10, partial=False)

or from a shell (prints each violation, exits 1 if there is any):

    python -m seafl_dist.report.trace runs/quickstart-20250101-120000
    python -m seafl_dist.report.trace RUN --profile profile.csv   # also check availability

An empty list means the trace is consistent. Each message starts with the event's line number
in ``events.jsonl`` (1-based) and its type and time. What is checked:

- events are in virtual-time order and have the keys required for their type (docs/running.md, "The run directory");
- job ids are unique; a job is started on a device with no job in flight, from the current
  version, at time 0 or at the time of the aggregation just before it; ``epoch_ends`` rise;
- M jobs are in flight after the starts at time 0 and after those of every aggregation,
  and never more than M;
- every finish carries the same upload size (``bytes``, ``model_bytes``: with ``compression.codec``), and the
  upload then takes ``upload_s`` × bytes / model_bytes;
- a finish comes at the job's planned ``b_E + upload_s`` or, for a notified job, at the end of
  the epoch in progress at the notify time (``b_e + upload_s``, the first b_e > τ) with
  ``epochs`` = e; jobs finishing at the same time come in increasing device order; no
  in-flight job is overdue;
- notify events occur only when ``partial``; at the finish that fills the buffer to >= K while
  an in-flight job blocks (t − t_k >= β), exactly the blocking jobs not yet notified are notified;
- an aggregate follows as soon as the buffer holds >= K and nothing blocks, at the time of the
  finish that allowed it, takes exactly the finished-but-unaggregated jobs, bumps the version
  by 1, and reports staleness = t − t_k <= β for every update;
- eval events exist, evaluate the current version at that version's time, and the last
  version reached is evaluated.

A FedCompass trace (``algorithm.name: fedcompass``) is checked by the rules of report/compass_replay.py instead:
groups, deadlines, each job's assigned steps against the speeds the trace itself shows.

A trace with churn (availability windows or dropouts: start events that carry ``upload_s``, or
``drop`` events) is checked by the rules of report/churn_replay.py instead of the two start rules
above; with ``population`` (a :class:`~seafl_dist.sim.population.Population`) it also checks that
no job starts on an offline device and every window drop is at its window's close.

``upload_s`` and ``epochs`` (E) are optional: when ``upload_s`` is None it is inferred from the
first job that finished without notification; when ``epochs`` is None every job's planned epoch
count is only required to be >= 1.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Optional

from seafl_dist.report.churn_replay import ChurnReplay
from seafl_dist.report.compass_replay import CompassReplay
from seafl_dist.report.replay import Replay
from seafl_dist.sim.clock import scaled_upload


def is_churn(events: list) -> bool:
    """A trace of a run with availability or dropouts: its start events carry their own upload_s."""
    return any(isinstance(e, dict) and (e.get("event") == "drop" or (e.get("event") == "start" and "upload_s" in e))
               for e in events)


def upload_of(events: list, upload_s: Optional[float]) -> tuple[Optional[float], list[str]]:
    """The upload time of a trace's jobs: ``clock.upload_s`` scaled by the byte ratio its finish events carry
    (``bytes`` / ``model_bytes``, with ``compression.codec``; sim/clock.py's expression), and the problem if those
    differ between finishes (an upload's size is a function of the codec and the layout, never of the values)."""
    sizes = {(e.get("bytes"), e.get("model_bytes")) for e in events if isinstance(e, dict) and e.get("event") == "finish"}
    if len(sizes) > 1:
        return upload_s, [f"finish events carry different upload sizes {sorted(sizes, key=str)}; an upload's size "
                          f"depends on the codec and the model's layout only"]
    sent, full = next(iter(sizes), (None, None))
    if sent is None or upload_s is None:
        return upload_s, []
    return scaled_upload(upload_s, sent, full), []


def check_trace(events: Iterable[dict], *, concurrency: int, buffer_size: int, staleness_limit: Optional[int],
                partial: bool, upload_s: Optional[float] = None, epochs: Optional[int] = None,
                schedule_only: bool = False, limit: int = 100, num_devices: Optional[int] = None,
                population=None, dropout: Optional[float] = None, churn: Optional[bool] = None,
                weights: bool = True, compass: Optional[dict] = None) -> list[str]:
    """Human-readable violations of the SPEC invariants by ``events`` (empty: none).

    ``concurrency`` M, ``buffer_size`` K, ``staleness_limit`` β (None = ∞), ``partial``: SEAFL²
    notifications allowed. ``schedule_only=True`` checks the bare :class:`~seafl_dist.sim.Scheduler`
    stream, which has no eval events and no update weights (the runtime adds them); ``weights=False`` a trace
    whose updates carry none (SEAFL's under DP without ``privacy.diagnostics``). At most ``limit``
    messages are listed, then a count of the rest. Churn traces: ``num_devices`` N lets the
    checker count the idle devices online at each refill, ``population`` tells who is online when,
    ``dropout`` 0 forbids drops inside a job's span (None: allowed); ``churn`` None detects the mode. ``compass``:
    a FedCompass trace, checked by report/compass_replay.py's rules with these keys of ``algorithm.fedcompass``
    (``q_min``, ``q_max``, ``speed_momentum``, ``latest_time_factor``) instead of M, K and β.
    """
    events = list(events)
    upload_s, sizes = upload_of(events, upload_s)
    if compass is not None:
        return sizes or CompassReplay(**compass, upload_s=upload_s, limit=limit).run(events)
    kw = dict(concurrency=concurrency, buffer_size=buffer_size, staleness_limit=staleness_limit, partial=partial,
              upload_s=upload_s, epochs=epochs, limit=limit, schedule_only=schedule_only, weights=weights)
    if sizes:
        return sizes
    if churn or (churn is None and (population is not None or is_churn(events))):
        return ChurnReplay(num_devices=num_devices, population=population, dropout=dropout, **kw).run(events)
    return Replay(**kw).run(events)


def _population(cfg: dict, profile: Optional[str]):
    """The run's device population from ``profile`` (or its config's ``devices.profile``), else None."""
    from seafl_dist.sim.population import Population
    from seafl_dist.sim.profiles import read_profiles

    dev = cfg["devices"]
    path = profile or dev.get("profile")
    if not path:
        return None
    seed = cfg["data"].get("seed")
    return Population(read_profiles(path), dev["num"], cfg["run"]["seed"] if seed is None else seed,
                      availability_scale=dev.get("availability_scale") or 1.0)


def check_run(run_dir: str | Path, *, profile: Optional[str] = None, **overrides) -> list[str]:
    """``check_trace`` of a run dir's ``events.jsonl`` with M, K, β, partial, upload_s, E, N and the
    device population from its ``config.yaml`` (the resolved config the run wrote) or ``profile``
    (a profile CSV: the population the run used, with ``data.seed`` and
    ``devices.availability_scale`` from the config); keyword arguments override them."""
    import yaml

    from seafl_dist.report.sinks import read_events

    run_dir = Path(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    alg = cfg["algorithm"]
    kw = dict(concurrency=cfg["devices"]["concurrency"], buffer_size=alg["buffer_size"],
              staleness_limit=alg["staleness_limit"], partial=alg["name"] == "seafl2" or bool(alg.get("partial")),
              upload_s=cfg["clock"]["upload_s"], epochs=cfg["train"]["epochs"], num_devices=cfg["devices"]["num"],
              population=_population(cfg, profile))
    kw["dropout"] = cfg["devices"].get("dropout") or 0.0  # config.yaml leaves it out when null: no random drops
    privacy = cfg.get("privacy") or {}  # left out of config.yaml at its defaults
    kw["weights"] = not (privacy.get("enabled") and not privacy.get("diagnostics") and alg["name"] in ("seafl", "seafl2"))
    if alg["name"] == "fedcompass":  # its section is left out of config.yaml at its defaults
        from dataclasses import asdict

        from seafl_dist.settings.fedcompass import FedCompassConfig
        keys = {**asdict(FedCompassConfig()), **(alg.get("fedcompass") or {})}
        kw["compass"] = {k: keys[k] for k in ("q_min", "q_max", "speed_momentum", "latest_time_factor")}
    kw.update(overrides)
    return check_trace(read_events(run_dir / "events.jsonl"), **kw)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from seafl_dist.settings import ConfigError

    parser = argparse.ArgumentParser(prog="python -m seafl_dist.report.trace",
                                     description="Check a run's events.jsonl against the SPEC invariants "
                                                 "(exit 1 on a violation).")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--profile", metavar="FILE", help="the device profile CSV the run used: also check "
                        "that no job starts on an offline device and window drops are at windows' closes")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as stop:  # usage errors (2) and --help (0) as a return code, not an exception
        return int(stop.code or 0)
    try:
        problems = check_run(args.run_dir, profile=args.profile)
    except ConfigError as err:  # a bad profile file: one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    print(f"{args.run_dir}: {'OK' if not problems else f'{len(problems)} violation(s)'}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
