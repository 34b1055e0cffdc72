"""The ``seafl`` command.

    seafl run CONFIG [key.sub=value ...] [--out DIR]
        Run one experiment. Under torchrun (WORLD_SIZE > 1) rank 0 aggregates and the other
        ranks train; otherwise everything runs in this process. The run dir (default
        runs/<config-name>-<timestamp>) gets config.yaml, events.jsonl, metrics.csv,
        partition.json and summary.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from seafl_dist.config import ConfigError, load_config

EPILOG = """examples:
  seafl run configs/quickstart.yaml
  seafl run configs/quickstart.yaml algorithm.name=fedbuff run.seed=1 --out runs/fb
  torchrun --nproc_per_node=3 -m seafl_dist run configs/quickstart.yaml
Overrides are dotted config keys (see README "Configuration"); values are parsed as YAML
(null = none/infinity, e.g. algorithm.staleness_limit=null)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seafl", description="Semi-asynchronous federated learning on a virtual clock.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run one experiment from a YAML config",
                         description="Run one experiment from a YAML config with optional dotted overrides.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("config", help="YAML config file (e.g. configs/quickstart.yaml)")
    run.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides, applied in order")
    run.add_argument("--out", metavar="DIR", help="run directory (default: runs/<config-name>-<timestamp>)")
    return parser


def default_out_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def cmd_run(args) -> int:
    from seafl_dist.runtime.launch import launch
    cfg = load_config(args.config, args.overrides)
    out = Path(args.out) if args.out else default_out_dir(cfg.name)
    return launch(cfg, out)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return {"run": cmd_run}[args.command](args)
    except ConfigError as err:
        print(f"seafl: error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:  # e.g. a dataset that is not on disk
        print(f"seafl: error: {err}", file=sys.stderr)
        return 2
