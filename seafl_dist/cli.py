"""The ``seafl`` command.

    seafl run CONFIG [key.sub=value ...] [--out DIR]
    seafl run --resume RUN_DIR [key.sub=value ...]
        Run one experiment. Under torchrun (WORLD_SIZE > 1) rank 0 aggregates and the other
        ranks train; otherwise everything runs in this process. The run dir (default
        runs/<config-name>-<timestamp>) gets config.yaml, events.jsonl, metrics.csv,
        partition.json, summary.json, model.pt and, while it runs, private/ (checkpoints: server-private, never
        published; `seafl release` copies the rest). Rerunning
        the same command with the same --out continues from the last checkpoint; so does
        --resume RUN_DIR (config from the run dir). A completed run is left as it is (exit 0). A dir
        holding a run of another config is refused (exit 2) unless --overwrite; a dir another
        live run writes is refused too (its lock, seafl.lock, names the holder).
        Under torchrun --max-restarts=N a lost rank's attempt is restarted and resumes by itself.
        Exit status: 0, 1 (the run failed), 2 (bad input), 130 (SIGTERM/SIGINT/SIGUSR1: checkpointed).
        --dry-run checks config, data, model, partition and run dir and prints what the run
        would do, training and writing nothing (seafl_dist/runtime/dryrun.py).

    seafl sweep CONFIG [key.sub=value ...] [--grid key=v1,v2 ...] [--seeds 0,1,2] [--jobs P] [--out DIR]
        Run the cross product of a grid, each run its own process and dir, P at a time; rerun to
        resume (completed runs are skipped). CONFIG is a run config or a sweep file
        (seafl_dist/experiments/sweep.py documents the format; configs/paper/, configs/digits/).
        --list prints the runs (index, name, overrides); --index I runs only run I (a SLURM job
        array runs one index per task: slurm/sweep.sbatch).

    seafl report RUN_OR_SWEEP_DIR... [--target 0.5,0.7] [--baseline fedbuff] [--out DIR]
        report.md/.csv, runs.csv, the figures (PNG, PDF, CSV), participation.csv/.png (each device's
        share of the aggregation weight against its speed) and (for one run) timeline.png.
        --extract OUT copies a sweep's small files for a repository; --leaderboard and --robustness write the
        tables and figures of docs/leaderboard.md and docs/robustness.md from such extracts; --across the table
        of the same arms across settings (the base dir first).

    seafl release RUN_DIR OUT [--partial] [--check OTHER [--device K]]
        Copy only what the run released (its run files and W&B's pointers; never private/, checkpoints,
        residuals, wandb/, temps or the lock) into OUT, for publishing, every file's time set to 2000-01-01.
        Refused: a DP run with privacy.diagnostics, an unfinished run (unless --partial). --check compares
        two neighbouring DP runs' released files (seafl_dist/runtime/release.py); exit 1 on a difference
        outside the evaluation of the noised model and what derives from it.

    seafl devices import-fedscale CAPACITY BEHAVE --out profile.csv [--rows N]
        Convert FedScale's client_device_capacity and client_behave_trace (pickles, read as plain
        data only) into a device profile CSV for devices.profile (docs/devices.md).

    seafl configs [--keys]
        The configs shipped with the package; CONFIG may be one of these names (``quickstart``).
        --keys prints every config key instead: type, default and help (docs/configuration.md).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from pathlib import Path

from seafl_dist.cli_args import add_devices_parser, add_release_parser, add_report_parser, add_sweep_parser
from seafl_dist.report.sinks import RunFileError
from seafl_dist.runtime.target import run_target
from seafl_dist.settings import ConfigError
from seafl_dist.settings.errors import ModuleContractError

EPILOG = """examples:
  seafl run configs/quickstart.yaml
  seafl run configs/quickstart.yaml algorithm.name=fedbuff algorithm.update_norm_factor=10 run.seed=1 --out runs/fb
  torchrun --nproc_per_node=3 -m seafl_dist run configs/quickstart.yaml
  seafl run --resume runs/fb                 # continue an interrupted run from its checkpoint
  seafl run configs/quickstart.yaml --out runs/q --dry-run   # check everything, train and write nothing
  seafl run configs/quickstart.yaml --out runs/fb --overwrite   # replace the fedbuff run held there
Overrides are dotted config keys (every key: docs/configuration.md, or `seafl configs --keys`); values are parsed as YAML
(null = none/infinity, e.g. algorithm.staleness_limit=null)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seafl", description="Semi-asynchronous federated learning on a virtual clock.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run one experiment from a YAML config",
                         description="Run one experiment from a YAML config with optional dotted overrides.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("config", nargs="?", help="YAML config file, or a packaged config's name (e.g. quickstart)")
    run.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides, applied in order")
    run.add_argument("--out", metavar="DIR", help="run directory (default: runs/<config-name>-<timestamp>); "
                     "if it holds a checkpoint of the same config, the run continues from it")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint "
                     "(config: RUN_DIR/config.yaml unless CONFIG is given)")
    run.add_argument("--dry-run", action="store_true", help="check the config, data, model, partition and run dir, "
                     "print what the run would do; train nothing, write nothing")
    run.add_argument("--overwrite", action="store_true", help="if the run dir holds a run of another config "
                     "(finished or not), delete its files and start this one (without it: refused, exit 2)")
    add_sweep_parser(sub)
    add_report_parser(sub)
    add_release_parser(sub)
    add_devices_parser(sub)
    configs = sub.add_parser("configs", help="list the packaged configs (usable by name: seafl run quickstart)")
    configs.add_argument("--keys", action="store_true", help="list every config key: type, default and help")
    return parser


def cmd_run(args) -> int:
    if args.dry_run:  # a user's plugin module, imported as the config loads, must leave no __pycache__
        sys.dont_write_bytecode = True
    cfg, out = run_target(args)  # before importing torch: config errors come fast
    if args.dry_run:
        from seafl_dist.runtime.dryrun import dry_run
        from seafl_dist.runtime.launch import default_out_dir
        return dry_run(cfg, out if out is not None else default_out_dir(cfg.name), explicit=bool(args.resume),
                       overwrite=args.overwrite)
    from seafl_dist.runtime.launch import launch
    launch(cfg, out, explicit=bool(args.resume), overwrite=args.overwrite)  # the same path as seafl_dist.run
    return 0


def cmd_sweep(args) -> int:
    import shlex

    if args.dry_run:  # as for `seafl run --dry-run`: plugin modules leave no __pycache__
        sys.dont_write_bytecode = True

    from seafl_dist.experiments import load_sweep, parse_grid_arg, run_sweep
    from seafl_dist.experiments.sweep import parse_seeds
    sweep = load_sweep(args.config, grid=[parse_grid_arg(g) for g in args.grid],
                       seeds=parse_seeds(args.seeds) if args.seeds else None, overrides=args.overrides, name=args.name)
    if args.launcher:
        sweep.launcher = shlex.split(args.launcher)
    if args.list:
        return list_runs(sweep, args)
    out = Path(args.out) if args.out else Path("runs") / sweep.name
    return run_sweep(sweep, out, jobs=args.jobs, dry_run=args.dry_run, index=args.index)


def list_runs(sweep, args) -> int:
    """``--list``: one line per run, ``index<TAB>name<TAB>overrides``, on stdout (for scripts and job arrays)."""
    from seafl_dist.experiments.sweep import run_overrides
    runs = sweep.expand()
    for i, r in enumerate(runs):
        print(f"{i}\t{r.name}\t{' '.join(run_overrides(r))}")
    print(f"{len(runs)} runs; one per SLURM array task: sbatch --array=0-{len(runs) - 1} slurm/sweep.sbatch "
          f"{args.config} ... (the same arguments, without --list)", file=sys.stderr)
    return 0


def cmd_report(args) -> int:
    from seafl_dist.experiments.sweep import split_top_level
    from seafl_dist.report.build import write_report
    try:
        targets = [float(t) for t in split_top_level(args.target)] if args.target else None
    except ValueError:
        raise ConfigError(f"--target {args.target!r} is not a comma-separated list of numbers (targets of the target metric, e.g. 0.5,0.7)")
    from seafl_dist.runtime.launch import default_out_dir
    if args.across:
        from seafl_dist.report.across import command
        return command(args, targets)
    if args.robustness:
        from seafl_dist.report.robustness import command
        return command(args)
    if args.extract or args.leaderboard:
        from seafl_dist.report.leaderboard import command
        return command(args, targets)
    out = Path(args.out) if args.out else Path(args.dirs[0]) if len(args.dirs) == 1 else default_out_dir("report")
    result = write_report(args.dirs, out, targets=targets, baseline=args.baseline, until=args.until,
                          log_x=args.log_x, seed_curves=args.seed_curves, zoom=not args.no_zoom)
    print(result["markdown"])
    print("wrote " + ", ".join(str(p) for p in result["files"].values()), file=sys.stderr)
    return 0


def cmd_devices(args) -> int:
    from seafl_dist.sim.fedscale import import_fedscale
    n = import_fedscale(args.capacity, args.behave, args.out, rows=args.rows)
    print(f"wrote {n} device profiles to {args.out}; use it with devices.profile={args.out}", file=sys.stderr)
    return 0


def cmd_release(args) -> int:
    from seafl_dist.runtime.release import check, check_releasable, release
    if args.device is not None and not args.check:
        raise ConfigError(f"--device {args.device} is given without --check; give --check OTHER with it")
    if args.check:
        check_releasable(args.run_dir, partial=args.partial)
        if check(Path(args.run_dir), Path(args.check), args.device):
            return 1
    names = release(args.run_dir, args.out, partial=args.partial)
    print(f"seafl: released {len(names)} files of {args.run_dir} into {args.out} (times set to 2000-01-01): "
          f"{', '.join(names)}", file=sys.stderr)
    return 0


def cmd_configs(args) -> int:
    if args.keys:
        from seafl_dist.settings.reference import text
        sys.stdout.write(text())
        return 0
    from seafl_dist.settings.files import describe, packaged, packaged_dir
    shipped = packaged()
    width = max(map(len, shipped), default=0)
    for name, path in shipped.items():
        print(f"{name:<{width}}  {describe(path)}")
    print(f"({len(shipped)} configs in {packaged_dir()}; run one with `seafl run NAME` or `seafl sweep NAME`)",
          file=sys.stderr)
    return 0


WORKER_GRACE_S = 5.0  # how long a torchrun worker leaves rank 0 to report a mistake both found


def _say_mistake(err: Exception) -> None:
    """One line for a mistake found before the run starts. Under torchrun every rank finds the same one, and
    the first rank to exit makes torchrun stop the others: a worker that got there first would take rank 0's
    line with it. So rank 0 says it at once, and a worker only after WORKER_GRACE_S, by which time torchrun has
    stopped it if rank 0 spoke; if rank 0 did not (a dataset missing on this node only), the worker says it.
    A mistake an earlier torchrun attempt said already (runtime/elastic.py) is not said again."""
    if getattr(err, "said", False):
        return
    if os.environ.get("RANK", "0") != "0":
        time.sleep(WORKER_GRACE_S)
    from seafl_dist.runtime.elastic import said_before
    if said_before(str(err)):
        return
    print(f"seafl: error: {err}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # overrides may also come after options (`seafl run C --out D key=value`)
    stray = [x for x in extra if x.startswith("-") or "=" not in x or not hasattr(args, "overrides")]
    if stray:
        parser.error("unrecognized arguments: " + " ".join(stray))
    if extra:
        args.overrides = list(args.overrides) + extra
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return {"run": cmd_run, "sweep": cmd_sweep, "report": cmd_report, "release": cmd_release,
                "devices": cmd_devices, "configs": cmd_configs}[args.command](args)
    except (ConfigError, FileNotFoundError) as err:  # FileNotFoundError: e.g. a dataset that is not on disk
        _say_mistake(err)
        return 2
    except RunFileError as err:  # a full disk before the run started (the run's own: RunFailed below)
        print(f"seafl: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # RunInterrupted, SweepSignal, or Ctrl-C outside a run
        why = f" ({err})" if str(err) else ""
        print(f"seafl: interrupted{why}; what the run had so far is in its run directory", file=sys.stderr)
        return 130
    except RuntimeError as err:
        from seafl_dist.runtime.launch import RunFailed
        if not isinstance(err, RunFailed):
            raise
        if os.environ.get("WORLD_SIZE", "1") != "1":  # under torchrun each rank named its error already
            return 1
        if isinstance(err.__cause__, RunFileError):  # a full disk: one line says what is kept and what to do
            print(f"seafl: error: {err.__cause__}", file=sys.stderr)
        elif isinstance(err.__cause__, ModuleContractError):  # a LightningModule that broke Lightning's contract
            print(f"seafl: error: {err}", file=sys.stderr)  # mid-run (the probe found nothing): one line, no traceback
        else:  # a bug (a user's plugin, ours): its traceback, then one line
            traceback.print_exception(err.__cause__ or err, file=sys.stderr)
            print(f"seafl: error: {err}", file=sys.stderr)
        return 1


def entry() -> None:
    """The ``seafl`` command and ``python -m seafl_dist``: :func:`main`, then exit."""
    code = main()
    if os.environ.get("WORLD_SIZE", "1") != "1":
        # A torchrun rank, however it ended (every file is closed by now): peers may be gone, and gloo's
        # threads may hold work objects whose tensors, freed while Python finalizes, abort the process
        # (SIGABRT, "terminate called without an active exception"). So it leaves without finalizing.
        import logging
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    # Python's exit ends with a full garbage collection over every object torch and Lightning
    # made at import: ~1.3 s per process here. The process is ending, so take them all out of
    # the collector's reach first.
    gc.freeze()
    sys.exit(code)
