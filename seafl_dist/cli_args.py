"""The arguments of ``seafl sweep``, ``seafl report``, ``seafl release`` and ``seafl devices`` (cli.py builds the
parser with them and runs the commands; its docstring says what each does)."""
from __future__ import annotations

import argparse


SWEEP_EPILOG = """examples:
  seafl sweep configs/quickstart.yaml --grid algorithm.name=seafl,fedbuff --seeds 0,1,2 --jobs 2
  seafl sweep configs/digits/buffer_size.yaml --jobs 2          # a sweep file; rerun to resume
  seafl sweep configs/paper/seafl2_cifar10.yaml --dry-run       # print the commands only
  seafl sweep configs/digits/buffer_size.yaml --list            # index, name, overrides of each run
  seafl sweep configs/digits/buffer_size.yaml --index 3         # run 3 only (SLURM arrays: slurm/sweep.sbatch)
Grid values are YAML, split at top-level commas (null = infinity)."""


def add_sweep_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of experiments, P at a time, resumable",
                       description="Run the cross product of a grid (x seeds), each run in its own process and dir.",
                       epilog=SWEEP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="run config or sweep file (YAML with base:/grid:)")
    p.add_argument("overrides", nargs="*", metavar="key.sub=value", help="overrides applied to every run")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a grid axis (repeatable)")
    p.add_argument("--seeds", metavar="0,1,2", help="run.seed values (replace the sweep file's seeds)")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="P", help="runs at a time (default 1)")
    p.add_argument("--out", metavar="DIR", help="sweep dir (default: runs/<sweep-name>, so a rerun resumes)")
    p.add_argument("--name", help="sweep name (default: the sweep file's name or stem)")
    p.add_argument("--launcher", help="command that replaces `python` for each run, e.g. 'torchrun --nproc_per_node=4'")
    p.add_argument("--dry-run", action="store_true",
                   help="validate every run's config, print the commands; write nothing")
    one = p.add_mutually_exclusive_group()
    one.add_argument("--list", action="store_true", help="print each run's index, name and overrides; run nothing")
    one.add_argument("--index", type=int, metavar="I", help="run only run I of --list (no report; resumable)")


def add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="tables and plots of run or sweep dirs",
                       description="Time-to-accuracy tables (per run and per grid point) and plots.")
    p.add_argument("dirs", nargs="+", metavar="RUN_OR_SWEEP_DIR")
    p.add_argument("--target", metavar="0.5,0.7", help="targets, values of the runs' target metric (test accuracy by "
                   "default; default: the sweep's or the runs' targets)")
    p.add_argument("--baseline", help="grid point label or algorithm to take time ratios against (e.g. fedbuff)")
    p.add_argument("--out", metavar="DIR", help="output dir (default: the one dir given, else runs/report-<timestamp>)")
    p.add_argument("--until", type=float, metavar="SECONDS",
                   help="end every time axis here (default: at the longest run's end; accuracy_vs_time.png's "
                        "close-up 10%% past the slowest grid point's mean reaching the highest target)")
    p.add_argument("--log-x", action="store_true", help="accuracy_vs_time.png: virtual time on a log scale")
    p.add_argument("--seed-curves", action="store_true",
                   help="accuracy_vs_time.png: draw each seed's curve faint under its grid point's mean")
    p.add_argument("--no-zoom", action="store_true",
                   help="accuracy_vs_time.png: one panel only, without the close-up around the targets beside it")
    p.add_argument("--extract", metavar="OUT", help="copy each finished run's small files and trace figures into OUT "
                   "(a leaderboard's committed data, report/extracts.py); report nothing")
    p.add_argument("--commit", help="with --extract: the commit that made the runs (default: this checkout's)")
    p.add_argument("--leaderboard", action="store_true", help="write leaderboard.md (arms ranked) and leaderboard.png "
                   "only (docs/leaderboard.md)")
    p.add_argument("--robustness", action="store_true", help="write robustness.md (attacks x defenses) and "
                   "robustness.png only (docs/robustness.md)")
    p.add_argument("--across", action="store_true", help="write across.md only: the arms of the second and later "
                   "dirs (each a setting changed on its own) in every dir, the first the base (docs/leaderboard.md)")


def add_release_parser(sub) -> None:
    p = sub.add_parser("release", help="copy only what a run released, for publishing (docs/privacy.md)",
                       description="Copy a run dir's released files (run files, W&B pointers) into OUT, their "
                                   "times normalised; never private/ (checkpoints, residuals, the noise key).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("out", metavar="OUT", help="a new or empty directory for the release")
    p.add_argument("--partial", action="store_true", help="release an unfinished (interrupted or failed) run's "
                   "files as they are, with a line saying the release is partial (without it: refused)")
    p.add_argument("--check", metavar="OTHER", help="first compare with a neighbouring run (or its release) made "
                   "with the same config and key: print what differs; exit 1, releasing nothing, on a difference "
                   "outside the evaluation of the noised model and what derives from it")
    p.add_argument("--device", type=int, metavar="K", help="with --check: the device whose data differ (then "
                   "everything before its first aggregation must be the same); default: from the first difference")


def add_devices_parser(sub) -> None:
    p = sub.add_parser("devices", help="device profiles: convert real traces (docs/devices.md)",
                       description="Device profiles for devices.profile (docs/devices.md).")
    what = p.add_subparsers(dest="devices_command", metavar="SUBCOMMAND", required=True)
    fs = what.add_parser("import-fedscale", help="FedScale's device capacity and behaviour traces -> a profile CSV",
                         description="Convert FedScale's client_device_capacity and client_behave_trace pickles "
                                     "(read as plain data only; a pickle naming any class is refused) into a "
                                     "device profile CSV, as FedScale's own client reads them (docs/devices.md).")
    fs.add_argument("capacity", metavar="CAPACITY", help="FedScale's client_device_capacity")
    fs.add_argument("behave", metavar="BEHAVE", help="FedScale's client_behave_trace")
    fs.add_argument("--out", required=True, metavar="FILE", help="the profile CSV to write")
    fs.add_argument("--rows", type=int, metavar="N", help="rows to write (default: the larger file's clients)")
