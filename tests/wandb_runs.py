"""Helpers of the W&B tests: an offline environment (no key, no network) and what the offline files hold."""
import os
from pathlib import Path

from seafl_dist.report.wandb_files import read_offline_run


def offline_env(tmp: Path, base: dict | None = None, fault: str | None = None) -> dict:
    """``base`` (default: this environment) without W&B settings, W&B's own folders under ``tmp``;
    ``fault`` sets SEAFL_FAULT."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("WANDB_") and k != "SEAFL_FAULT"}
    env.update(WANDB_CONFIG_DIR=str(tmp / "wbconfig"), WANDB_CACHE_DIR=str(tmp / "wbcache"),
               WANDB_DATA_DIR=str(tmp / "wbdata"), NETRC=str(tmp / "no-netrc"))
    if fault:
        env["SEAFL_FAULT"] = fault
    return env


def history_across(files) -> list[dict]:
    """The history rows of several ``.wandb`` files, in order."""
    return [h for f in files for h in read_offline_run(f)["history"]]


def logged_versions(files) -> list[int]:
    """Every version the files log, sorted, repeats kept (a version logged twice shows twice)."""
    return sorted(h["version"] for h in history_across(files) if "version" in h)
