"""Run a sweep: every run its own process and directory, ``jobs`` at a time, resumable.

    <out>/sweep.json            the sweep (grid, seeds, targets, baseline) and its runs
    <out>/configs/<run>.yaml    each run's resolved config, as handed to `seafl run`
    <out>/<run>/                each run's dir (config.yaml, events.jsonl, metrics.csv, summary.json, log.txt)
    <out>/report.md ...         the report (`seafl report <out>`), written when the sweep ends

Each run is ``python -m seafl_dist run <out>/configs/<run>.yaml --out <out>/<run>`` (the sweep's
``launcher``, e.g. ``torchrun --standalone --nproc_per_node=4``, replaces ``python``), its
output appended to ``<run>/log.txt``. ``index=I`` runs only the I-th run of ``Sweep.expand()``
(the order ``seafl sweep --list`` prints), with no report: a SLURM job array runs one index per
task, all writing the same sweep.json and configs (atomically, so concurrent tasks never read a
half-written file), and ``seafl report <out>`` follows. A run whose ``summary.json`` says
``completed`` (its files matching the sizes and checksums it records) and whose config is
unchanged (runtime/rundir.py's comparer, as for ``seafl run``) is skipped, and an interrupted run
continues from its checkpoint (``seafl run`` resumes a run dir that holds one), so rerunning an
interrupted sweep resumes it. A run dir of this config (completed or interrupted) that another
numerics version trained (seafl_dist/versions.py) stops the sweep before anything runs, in one line. A run whose config changed (finished or not) is rerun from scratch
in its own dir: its old files are deleted first (under the dir's lock), so no dir mixes two runs. SIGTERM, SIGINT or SIGUSR1 to the sweep stop it like Ctrl-C: its running runs get
SIGTERM (each checkpoints first) and are waited for. A failed run does not stop the others; the
sweep then exits 1 and names the failed runs. With ``jobs`` > 1, or a launcher that starts several
ranks per run, each rank gets ``cpus // (jobs * ranks)`` torch threads (``runtime.threads``,
``OMP_NUM_THREADS``) unless the config sets ``runtime.threads``, so parallel runs do not
oversubscribe the cores; ``cpus`` is what this process may use (its affinity and the Slurm
allocation, :func:`~seafl_dist.runtime.cpus.cpus_here`), not the node's total.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path


from seafl_dist.settings import ConfigError, dump_config
from seafl_dist.experiments.cpus import ranks_per_run, threads_per_run  # noqa: F401 (their home before)
from seafl_dist.experiments.sweep import Sweep, SweepRun
from seafl_dist.report.metric import Metric
from seafl_dist.report.sinks import FINISHED, read_config, read_summary
from seafl_dist.report.runs import repeated_key_warning
from seafl_dist.runtime.rundir import (clear, config_diff, config_tree, numerics_fix, numerics_mismatch,
                                       profile_mismatch, proof_mismatch)
from seafl_dist.runtime.runlock import RunDirLock
from seafl_dist.runtime.signals import Interrupts, SweepSignal


def run_command(sweep: Sweep, config_path: Path, run_dir: Path) -> list[str]:
    prefix = sweep.launcher or [sys.executable]
    return [*prefix, "-m", "seafl_dist", "run", str(config_path), "--out", str(run_dir)]


def run_status(run_dir: Path) -> str | None:
    return (read_summary(run_dir) or {}).get("status")


def _done_line(run_dir: Path) -> str:
    s = read_summary(run_dir)
    if s is None:
        return ""
    metric = Metric(s.get("target_metric", "accuracy"), s.get("target_mode", "max"))
    ttt = ", ".join(f"{metric.target_text(t)} " + ("never" if v is None else f"{v:.0f}s")
                    for t, v in s["time_to_target"].items())
    best = s.get("best", s.get("best_accuracy"))
    return (f"best {'acc' if metric.is_accuracy else metric.name} {best:.4f}, time to {ttt}" if best is not None
            else "")


def _tail(path: Path, n: int = 6) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])


class _Pool:
    """At most ``jobs`` child processes; reports each start and end on ``stream``."""

    def __init__(self, jobs: int, env: dict, stream):
        self.jobs, self.env, self.stream = jobs, env, stream
        self.running: dict[subprocess.Popen, tuple] = {}

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def start(self, tag: str, run: SweepRun, cmd: list[str], run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "summary.json").unlink(missing_ok=True)  # a stale summary must not count as this run's
        log = open(run_dir / "log.txt", "a")  # a resumed run keeps the log of its earlier part
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
        self.running[proc] = (tag, run, run_dir, log, time.monotonic())
        self.say(f"{tag} start {run.name}")

    def reap(self) -> list[tuple[SweepRun, bool]]:
        done = []
        for proc in [p for p in self.running if p.poll() is not None]:
            tag, run, run_dir, log, t0 = self.running.pop(proc)
            log.close()
            ok = proc.returncode == 0 and run_status(run_dir) in FINISHED
            # the real seconds carry the devices' data under DP (docs/privacy.md, "No wall-clock channel")
            took = "" if run.config.privacy.withheld else f" in {time.monotonic() - t0:.0f}s"
            if ok:
                self.say(f"{tag} done  {run.name}{took}: {_done_line(run_dir)}")
            else:
                self.say(f"{tag} FAILED {run.name} (exit {proc.returncode}, status {run_status(run_dir)}); "
                         f"log {run_dir / 'log.txt'}:\n{_tail(run_dir / 'log.txt')}")
            done.append((run, ok))
        return done

    def stop(self) -> None:
        """SIGTERM every child: each checkpoints and writes its summary (interrupted); a rerun resumes it."""
        for proc in self.running:
            proc.terminate()
        for proc in self.running:  # time to checkpoint and write summary.json
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for _, _, _, log, _ in self.running.values():
            log.close()


def _why_rerun(run: SweepRun, run_dir: Path) -> str | None:
    """None: ``run_dir`` holds this run, completed and intact (skip it); "": run it (fresh or resumed);
    otherwise why its dir must be cleared first (another config's run, or files that are not the run's).
    A run of this config that another numerics version trained is refused (its bits are not this code's)."""
    saved, summary = read_config(run_dir), read_summary(run_dir)
    if saved is None:
        return ""
    diff = config_diff(saved, config_tree(run.config))
    if diff:
        return f"its config changed ({', '.join(diff[:4])}{' ...' if len(diff) > 4 else ''})"
    stale = numerics_mismatch(summary) if summary is not None else None
    if stale:
        raise ConfigError(f"sweep run {run.name}: {run_dir} holds a run ({summary.get('status')}) trained {stale}; "
                          f"{numerics_fix(summary, f'another --out (or delete {run_dir})')}")
    if (summary or {}).get("status") not in FINISHED:
        return ""
    mismatch = proof_mismatch(run_dir, summary) or profile_mismatch(run.config, summary.get("profile_sha256"))
    return None if mismatch is None else f"it says {summary['status']}, but {mismatch}"


def prepare_sweep(sweep: Sweep, out: Path, jobs: int, index: int | None = None,
                  write: bool = True) -> list[tuple[SweepRun, Path, Path]]:
    """Expand and validate every run (and ``index``); write sweep.json and the per-run configs
    (not with ``write=False``: a dry run only says where they would go)."""
    runs = sweep.expand(threads=threads_per_run(jobs, sweep.launcher))
    _check_profiles(sweep, runs)
    if index is not None and not 0 <= index < len(runs):
        raise ConfigError(f"--index {index}: sweep '{sweep.name}' has {len(runs)} runs, indices 0-{len(runs) - 1}; "
                          "`seafl sweep ... --list` prints them")
    if not write:
        return [(r, out / "configs" / f"{r.name}.yaml", out / r.name) for r in runs]
    (out / "configs").mkdir(parents=True, exist_ok=True)
    labels = list(dict.fromkeys(r.label for r in runs))  # listed by point, then seed
    listed = sorted(runs, key=lambda r: (labels.index(r.label), r.seed))
    index = {r.name: i for i, r in enumerate(runs)}  # --index I runs runs[I]
    meta = {**sweep.describe(), "runs": [{"index": index[r.name], "name": r.name, "label": r.label, "point": r.point,
                                          "seed": r.seed} for r in listed]}
    _write_atomic(out / "sweep.json", json.dumps(meta, indent=2, default=str) + "\n")
    planned = []
    for r in runs:
        path = out / "configs" / f"{r.name}.yaml"
        _write_atomic(path, dump_config(r.config))
        planned.append((r, path, out / r.name))
    return planned


def _check_profiles(sweep: Sweep, runs: list[SweepRun]) -> None:
    """Every devices.profile a run names exists, before any run starts (not one failure per run later)."""
    for r in runs:
        path = r.config.devices.profile
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"sweep '{sweep.name}', point '{r.label}': devices.profile={path} is not a file "
                              f"(relative paths are taken from the directory the sweep runs in, {Path.cwd()}); "
                              "run the sweep from the directory the path is relative to (for a packaged sweep: a "
                              "checkout of the repository) or give an absolute path")


def _flag_repeated_keys(out: Path, stream) -> None:
    """An existing sweep dir of an older seafl_dist whose runs repeat a key in their names: one line."""
    try:
        names = [r["name"] for r in json.loads((out / "sweep.json").read_text()).get("runs", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # no sweep dir yet (or not one of ours: prepare_sweep rewrites it)
    warning = repeated_key_warning(out, names)
    if warning:
        print(warning, file=stream)


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename: array tasks write the same files while others read them."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_sweep(sweep: Sweep, out_dir: str | Path, *, jobs: int = 1, stream=None, dry_run: bool = False,
              report: bool = True, index: int | None = None) -> int:
    """Run every run (or only run ``index``) not yet completed; 0 if all completed, 1 if any failed.
    ``dry_run``: validate every run's config and print the commands, writing nothing; with ``index``,
    also dry-run that run in full (:mod:`seafl_dist.runtime.dryrun`)."""
    stream = stream or sys.stderr
    out = Path(out_dir)
    jobs = 1 if index is not None else max(1, int(jobs))
    _flag_repeated_keys(out, stream)
    planned = prepare_sweep(sweep, out, jobs, index=index, write=not dry_run)
    if index is not None:
        planned, report = [planned[index]], False
    todo, stale = deque(), []
    for r, cfg_path, run_dir in planned:
        why = _why_rerun(r, run_dir)
        if why is None:
            print(f"skip  {r.name} ({run_status(run_dir)})", file=stream)  # completed, or stalled, or diverged
            continue
        if why:
            print(f"rerun {r.name}: {why}; its old files are deleted", file=stream)
            stale.append(run_dir)
        todo.append((r, cfg_path, run_dir))
    print(f"sweep {sweep.name}: {len(planned)} runs, {len(planned) - len(todo)} already completed, "
          f"{len(todo)} to run, {jobs} at a time; output in {out}", file=stream, flush=True)
    shared = threads_per_run(jobs, sweep.launcher) is not None
    threads = planned[0][0].config.runtime.threads if planned and shared else None
    if dry_run:
        for r, cfg_path, run_dir in todo:
            print(" ".join(run_command(sweep, cfg_path, run_dir)), file=stream)
        print(f"sweep {sweep.name}: dry run, nothing written (a real sweep writes {out}/sweep.json and "
              f"{out}/configs/*.yaml first)" + (f"; each rank gets runtime.threads={threads}" if threads else ""),
              file=stream)
        if index is not None:  # one run (a job array's task): check its data, model and run dir too
            from seafl_dist.runtime.dryrun import dry_run
            from seafl_dist.runtime.cpus import cpus_here
            ranks = ranks_per_run(sweep.launcher, cpus_here())  # the launcher's ranks, for the layout line
            return dry_run(planned[0][0].config, planned[0][2], explicit=False,
                           environ={**os.environ, "WORLD_SIZE": str(ranks)} if ranks > 1 else None)
        return 0
    for run_dir in stale:
        with RunDirLock(run_dir):  # never while a run of it is live; then seafl run starts it afresh
            clear(run_dir, extra=("log.txt",))
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    pool, failed = _Pool(jobs, env, stream), []
    # Without this a SIGTERM/SIGUSR1 would end the sweep at once, and under Slurm the job step
    # with it, killing the runs before they wrote their checkpoint and summary. After the first
    # signal later ones are ignored, so nothing cuts the wait for the runs short.
    with Interrupts(raise_as=SweepSignal, what="the sweep"):
        try:
            _run_all(sweep, pool, todo, jobs, failed)
        except BaseException:
            pool.say(f"sweep {sweep.name}: stopping {len(pool.running)} running run(s); rerun the same command "
                     f"to resume")
            pool.stop()
            raise
    if report:
        _report(sweep, out, stream)
    if failed:
        print(f"sweep {sweep.name}: {len(failed)} of {len(planned)} runs failed: {', '.join(failed)}", file=stream)
        return 1
    if index is not None:
        print(f"sweep {sweep.name}: run {index} ({planned[0][0].name}) completed; when every run is done: "
              f"seafl report {out}", file=stream)
        return 0
    print(f"sweep {sweep.name}: all {len(planned)} runs completed", file=stream)
    return 0


def _run_all(sweep: Sweep, pool: _Pool, todo, jobs: int, failed: list) -> None:
    """Start every run, ``jobs`` at a time, and wait for all; failed runs' names go to ``failed``."""
    n = len(todo)
    for i in range(n):
        while len(pool.running) >= jobs:
            failed += [r.name for r, ok in pool.reap() if not ok]
            time.sleep(0.1)
        r, cfg_path, run_dir = todo[i]
        pool.start(f"[{i + 1}/{n}]", r, run_command(sweep, cfg_path, run_dir), run_dir)
    while pool.running:
        failed += [r.name for r, ok in pool.reap() if not ok]
        time.sleep(0.1)


def _report(sweep: Sweep, out: Path, stream) -> None:
    from seafl_dist.report.build import write_report
    try:
        result = write_report([out], out, targets=sweep.targets, baseline=sweep.baseline)
    except Exception as err:  # a report problem must not hide the runs' own outcome
        print(f"sweep {sweep.name}: no report ({type(err).__name__}: {err})", file=stream)
        return
    print(result["markdown"].split("## Runs")[0].rstrip())
    print(f"report: {', '.join(str(p) for p in result['files'].values())}", file=stream)
