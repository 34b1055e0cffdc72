"""Experiments: sweep files, their expansion into runs, and the process pool that runs them."""
from seafl_dist.experiments.sweep import Sweep, SweepRun, load_sweep, parse_grid_arg
from seafl_dist.experiments.runner import run_sweep

__all__ = ["Sweep", "SweepRun", "load_sweep", "parse_grid_arg", "run_sweep"]
