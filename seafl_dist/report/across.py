"""The same arms across settings, each changed on its own (docs/leaderboard.md's point-3 table).

    seafl report docs/leaderboard/cifar10 docs/leaderboard/cifar10-heavy-tail docs/leaderboard/cifar10-dirichlet \\
        --across --out docs/leaderboard/cifar10-settings

It owns one table: the first dir is the base (a leaderboard's extract, or any dir of finished runs), each later
dir one setting of it changed on its own. Its rows are the arms that a later dir holds (the settings' arms: the
base may hold more), in the base's rank order (an arm the base lacks after them, in the order a setting first
holds it). For each dir and arm: the mean ± sample sd of the time to the target over the seeds that reached it
and how many did, the arm's rank among the table's arms in that dir (the leaderboard's rank,
report/leaderboard.py: seeds that reached it, then their median time, then the mean best accuracy), and its mean
time over the baseline's in that dir ("—" where either never reached it; "not run" where the dir lacks the arm).
Everything is read from the dirs' runs, so the page's table is regenerated from committed extracts byte for byte
(tests/unit/test_across.py checks it).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from seafl_dist.report.leaderboard import _stats, _table, rows
from seafl_dist.report.runs import RunResult, find_runs
from seafl_dist.settings import ConfigError

NOT_RUN = "not run"


def table(settings: list[tuple[str, list[RunResult]]], target: float) -> list[dict]:
    """One row per arm of the settings after the first (module docstring): its label and, per setting name, its
    leaderboard row at ``target`` among the table's arms (``None``: the setting lacks the arm)."""
    (_, base), later = settings[0], settings[1:]
    labels = list(dict.fromkeys(r.label for _, runs in later for r in runs))
    order = {a["label"]: a["rank"] for a in rows([r for r in base if r.label in labels], [target])}
    labels.sort(key=lambda label: (label not in order, order.get(label, 0)))  # stable: the rest as first held
    by_setting = {name: {a["label"]: a for a in rows([r for r in runs if r.label in labels], [target])}
                  for name, runs in settings if any(r.label in labels for r in runs)}
    return [{"label": label, "cells": {name: by_setting.get(name, {}).get(label) for name, _ in settings}}
            for label in labels]


def _mean(arm: dict | None, target: float) -> float | None:
    reached = [x for x in (arm or {}).get("times", {}).get(target, []) if math.isfinite(x)]
    return sum(reached) / len(reached) if reached else None


def markdown(arms: list[dict], names: list[str], target: float, baseline: str | None) -> str:
    """The table and the line that reads it, as markdown."""
    head = ["arm"]
    for name in names:
        head += [f"{name}: to {target:g}, mean ± sd (k/n)", f"{name}: rank"]
        if baseline:
            head.append(f"{name}: ÷ {baseline}")
    base_of = {name: _mean(next((a["cells"][name] for a in arms if a["label"] == baseline), None), target)
               for name in names}
    body = []
    for a in arms:
        row = [a["label"]]
        for name in names:
            cell = a["cells"][name]
            if cell is None:
                row += [NOT_RUN, "—"] + (["—"] if baseline else [])
                continue
            row += [_stats(cell["times"][target]), f"{cell['rank']}/{sum(x['cells'][name] is not None for x in arms)}"]
            if baseline:
                mine, theirs = _mean(cell, target), base_of[name]
                row.append(f"{mine / theirs:.2f}" if mine is not None and theirs else "—")
        body.append(row)
    note = (f"Time to {target:g} in virtual s over the seeds that reached it; rank k/n: among the n arms of this "
            f"table that the setting holds, by seeds that reached {target:g}, then their median time, then the mean "
            f"best accuracy")
    note += f"; ÷ {baseline}: the arm's mean time over {baseline}'s in the same setting." if baseline else "."
    return _table(head, body) + "\n\n" + note + "\n"


def command(args, targets: list[float] | None) -> int:
    """``seafl report BASE SETTING... --across [--target T] [--baseline B] [--out DIR]`` (cli.py hands it here)."""
    if len(args.dirs) < 2 or args.leaderboard or args.extract or args.robustness:
        raise ConfigError("--across takes two or more dirs (the base first, then each setting changed on its own) and "
                          "no --leaderboard, --extract or --robustness")
    from seafl_dist.report.build import default_baseline, default_targets
    settings = []
    for d in args.dirs:
        runs = [r for r in find_runs([d]) if r.status == "completed"]
        if not runs:
            raise FileNotFoundError(f"no finished runs under {d}")
        settings.append((Path(d).name, runs))
    found = targets or default_targets(args.dirs[:1], settings[0][1])
    if not found:
        raise ConfigError(f"{args.dirs[0]} names no targets (its sweep.json or its runs' run.targets): give --target")
    baseline = args.baseline or default_baseline(args.dirs)
    arms = table(settings, max(found))
    if baseline and baseline not in {a["label"] for a in arms}:
        raise ConfigError(f"--baseline {baseline!r} is not an arm of the settings ({', '.join(a['label'] for a in arms)})"
                          f": give one of them")
    text = markdown(arms, [name for name, _ in settings], max(found), baseline)
    out = Path(args.out) if args.out else Path(args.dirs[0])
    out.mkdir(parents=True, exist_ok=True)
    (out / "across.md").write_text(text)
    print(text)
    print(f"wrote {out / 'across.md'}", file=sys.stderr)
    return 0
