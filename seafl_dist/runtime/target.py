"""Which config and run dir ``seafl run`` means: CONFIG and --out, or --resume RUN_DIR with the config
kept there. Read before torch is imported, so that a mistake in either comes in a second, in one line.
"""
from __future__ import annotations

from pathlib import Path

from seafl_dist.settings import ConfigError, load_config


def run_target(args):
    """(config, run dir) of ``seafl run``, from CONFIG/--out or from --resume RUN_DIR; the run dir
    is None when neither names one (the launch path picks runs/<name>-<timestamp>)."""
    if args.config and "=" in args.config and not Path(args.config).exists():  # `--resume D key=value`
        args.overrides, args.config = [args.config, *args.overrides], None
    if not args.resume:
        if not args.config:
            raise ConfigError("seafl run needs a CONFIG file (e.g. configs/quickstart.yaml) or --resume RUN_DIR")
        return load_config(args.config, args.overrides), Path(args.out) if args.out else None
    run_dir = Path(args.resume)
    if args.out and Path(args.out).resolve() != run_dir.resolve():
        raise ConfigError(f"--resume {args.resume} and --out {args.out} name different run dirs; give only "
                          f"--resume (or rerun with the same --out, which resumes by itself)")
    if not args.config and not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"cannot resume {run_dir}: it holds no config.yaml, so it is not a seafl run dir")
    if args.config:
        return load_config(args.config, args.overrides), run_dir
    return _own_config(run_dir, args.overrides), run_dir


def _own_config(run_dir: Path, overrides: list[str]):
    """The config of ``--resume RUN_DIR``: its config.yaml, which a hand may have edited since the run
    started; then one line names the file and what is wrong with it."""
    own = run_dir / "config.yaml"
    try:
        cfg = load_config(own, overrides)
    except ConfigError as err:  # the file named once: the YAML error names it already
        raise ConfigError(f"cannot resume {run_dir}: " + (str(err) if str(own) in str(err) else f"{own}: {err}")) \
            from None
    if not overrides:  # nothing given beside it: a difference from the checkpoint is an edit of the file
        from seafl_dist.runtime.checkpoint import edited_config
        why = edited_config(run_dir, cfg)
        if why:
            raise ConfigError(f"cannot resume {run_dir}: {own} was edited after the run's last checkpoint was "
                              f"written: {why}; put it back as it was to resume (the checkpoint holds the old "
                              f"values), or delete {run_dir} to start afresh")
    return cfg
