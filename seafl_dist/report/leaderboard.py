"""The leaderboard (docs/leaderboard.md): one data set's arms ranked, from small files a repository can hold.

    seafl report runs/leaderboard-mnist --extract docs/leaderboard/mnist --commit 9f4ef74   # the small files
    seafl report docs/leaderboard/mnist --leaderboard --out docs/leaderboard/mnist          # the tables, the figure

It owns **the tables** (:func:`rows`, :func:`markdown`) and their figure: per arm, each seed's time to each
target, the mean ± sample sd over the seeds that reached it and how many did, the best accuracy, the rank and
the seeds won; and the trace figures per arm. They are read from an extract (report/extracts.py: each run's
small files and trace figures, the commit that made it), so the page's tables are regenerated from committed
files byte for byte (tests/unit/test_leaderboard.py checks it).

**Rank**: arms ordered by how many seeds reached the highest target (more first), then by the median of those
seeds' times (faster first), then by the mean best accuracy (higher first), then by label. **Seeds won**: in
each seed, the arm with the smallest time to the highest target (every arm tied at it wins; a seed no arm
reached it in has no winner). Times are virtual seconds.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from seafl_dist.report.extracts import extract
from seafl_dist.report.runs import RunResult, find_runs
from seafl_dist.report.tables import group_runs
from seafl_dist.settings import ConfigError

NEVER = "never"


def _commits_line(run_commits: dict[str, str]) -> str:
    """"commit `a`" for one commit; "commits `a` (n runs: their arms) and `b` (...)" in order of first appearance."""
    by: dict[str, list[str]] = {}
    for name, commit in run_commits.items():
        by.setdefault(commit, []).append(name)
    if len(by) == 1:
        return f"commit `{next(iter(by))}`"
    parts = []
    for commit, names in by.items():
        arms = list(dict.fromkeys(n.rsplit(",seed=", 1)[0] for n in names))
        parts.append(f"`{commit}` ({len(names)} run{'' if len(names) == 1 else 's'}: {', '.join(arms)})")
    return "commits " + ", ".join(parts[:-1]) + " and " + parts[-1]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.inf


def rows(runs: list[RunResult], targets: list[float]) -> list[dict]:
    """One row per arm (a sweep's grid point), in rank order (the module's docstring): each seed's time to each
    target (``inf``: never), the mean ± sd over the seeds that reached it, the best accuracy, the seeds won at the
    highest target, and the mean of each trace figure over the seeds (``trace.json``; absent: nan)."""
    top = max(targets)
    arms = []
    for g in group_runs(runs):
        by_seed = sorted(g.runs, key=lambda r: (r.seed is None, r.seed))
        arm = {"label": g.label, "seeds": [r.seed for r in by_seed], "times": {}, "best": [], "trace": {}}
        for t in targets:
            arm["times"][t] = [r.ttt(t) for r in by_seed]
        arm["best"] = [r.figures()[f"best_{r.metric.name}"] for r in by_seed]
        arm["ends"] = [r.config.get("run.max_time") or r.figures()["virtual_time"] for r in by_seed]  # its budget
        traces = [_trace(r) for r in by_seed]
        for key in ("aggregations_per_100s", "mean_staleness", "weighted_staleness", "waiting_share"):
            vals = [tr[key] for tr in traces if key in tr and not math.isnan(tr[key])]
            arm["trace"][key] = statistics.fmean(vals) if vals else math.nan
        arm["wall_s"] = sum(float(r.summary.get("wall_time_s") or 0.0) for r in by_seed)
        reached = [x for x in arm["times"][top] if math.isfinite(x)]
        arm["order"] = (-len(reached), _median(reached), -statistics.fmean(arm["best"]), g.label)
        arm["won"] = 0
        arms.append(arm)
    seeds = sorted({s for a in arms for s in a["seeds"]}, key=lambda s: (s is None, s))
    for seed in seeds:
        times = {id(a): a["times"][top][a["seeds"].index(seed)] for a in arms if seed in a["seeds"]}
        best = min(times.values(), default=math.inf)
        if math.isfinite(best):
            for a in arms:
                if times.get(id(a)) == best:
                    a["won"] += 1
    arms.sort(key=lambda a: a["order"])
    for i, a in enumerate(arms, 1):
        a["rank"] = i
    return arms


def chosen(arms: list[dict]) -> dict[str, str]:
    """A tuning sweep's choice (docs/leaderboard.md, "The protocol"): for each method, the label of its first trial
    in rank order. A trial's label is ``<method>:<setting>``; an arm without a colon is a method of its own."""
    picks: dict[str, str] = {}
    for a in arms:  # in rank order
        picks.setdefault(a["label"].split(":", 1)[0], a["label"])
    return picks


def _trace(run: RunResult) -> dict:
    path = run.dir / "trace.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _time(x: float) -> str:
    return f"{x:.0f}" if math.isfinite(x) else NEVER


def _stats(times: list[float]) -> str:
    reached = [x for x in times if math.isfinite(x)]
    if not reached:
        return f"{NEVER} (0/{len(times)})"
    sd = statistics.stdev(reached) if len(reached) > 1 else 0.0
    return f"{statistics.fmean(reached):.0f} ± {sd:.0f} ({len(reached)}/{len(times)})"


def _num(x: float, digits: int) -> str:
    return "—" if math.isnan(x) else f"{x:.{digits}f}"


def markdown(arms: list[dict], targets: list[float], machine: dict | None = None) -> str:
    """The page's tables (arms, then their traces; for a tuning sweep, each method's chosen trial) and the machine
    time, as markdown."""
    head = ["rank", "arm"]
    for t in targets:
        head += [f"{t:g}: each seed (s)", f"{t:g}: mean ± sd (k/n)"]
    head += ["best acc", f"seeds won at {max(targets):g}"]
    body = []
    for a in arms:
        row = [str(a["rank"]), a["label"]]
        for t in targets:
            row += [" · ".join(_time(x) for x in a["times"][t]), _stats(a["times"][t])]
        sd = statistics.stdev(a["best"]) if len(a["best"]) > 1 else 0.0
        row += [f"{statistics.fmean(a['best']):.4f} ± {sd:.4f}", f"{a['won']}/{len(a['seeds'])}"]
        body.append(row)
    thead = ["arm", "aggregations / 100 s", "mean staleness", "weighted staleness", "waiting on β", "machine time (s)"]
    tbody = [[a["label"], _num(a["trace"]["aggregations_per_100s"], 1), _num(a["trace"]["mean_staleness"], 2),
              _num(a["trace"]["weighted_staleness"], 2),
              "—" if math.isnan(a["trace"]["waiting_share"]) else f"{100 * a['trace']['waiting_share']:.1f}%",
              f"{a['wall_s']:.0f}"] for a in arms]
    parts = [_table(head, body), _table(thead, tbody)]
    if any(":" in a["label"] for a in arms):  # a tuning sweep's trials: each method's choice
        parts.append(_table(["method", "tuned setting (its first trial in rank order)", "rank"],
                            [[m, label.split(":", 1)[1] if ":" in label else "(its only arm)",
                              str(next(a["rank"] for a in arms if a["label"] == label))]
                             for m, label in chosen(arms).items()]))
    if machine:
        parts.append(f"Runs: {machine['runs']} of the sweep's {machine['runs_in_sweep']}, made at "
                     f"{_commits_line(machine['run_commits'])}; machine time {machine['machine_time_s']:.0f} s (the "
                     f"runs' wall times summed).")
    return "\n\n".join(parts) + "\n"


def _table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def figure(arms: list[dict], targets: list[float]):
    """Time to each target, a panel per target: each seed a dot, "never" a cross at the panel's right edge
    (``edge``, 5% past the largest budget ``run.max_time``, or where a run without one stopped); the arms top to bottom in
    rank order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    reached = [x for a in arms for x in a["ends"] + [y for t in targets for y in a["times"][t]] if math.isfinite(x)]
    edge = 1.05 * max(reached) if reached and max(reached) > 0 else 1.0
    fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets), 0.45 * len(arms) + 1.6), sharey=True,
                             squeeze=False)
    ys = list(range(len(arms)))[::-1]
    for ax, t in zip(axes[0], targets):
        for y, a in zip(ys, arms):
            got = [x for x in a["times"][t] if math.isfinite(x)]
            never = sum(not math.isfinite(x) for x in a["times"][t])
            ax.scatter(got, [y] * len(got), s=22, color="tab:blue", zorder=3)
            if never:
                ax.scatter([edge] * never, [y] * never, marker="x", s=40, color="tab:red", zorder=3)
        ax.axvline(edge, color="0.8", lw=0.8)
        ax.set_xlim(0, edge * 1.04)
        ax.set_title(f"to {t:g}")
        ax.set_xlabel("virtual time (s); × = never (within the budget)")
        ax.grid(axis="x", color="0.92")
    axes[0][0].set_yticks(ys, [a["label"] for a in arms])
    fig.tight_layout()
    return fig


def plot(arms: list[dict], targets: list[float], path: Path) -> Path:
    """:func:`figure` written to ``path``."""
    import matplotlib.pyplot as plt
    fig = figure(arms, targets)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_leaderboard(paths, out: str | Path, targets: list[float]) -> dict:
    """``leaderboard.md`` (the tables) and ``leaderboard.png`` (the figure) of the runs under ``paths`` into
    ``out``; the machine line from the first path's ``leaderboard.json`` where an extract has one."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = find_runs(paths)
    if not runs:
        raise FileNotFoundError(f"no finished runs under {', '.join(map(str, paths))}")
    arms = rows(runs, targets)
    meta = Path(paths[0]) / "leaderboard.json"
    text = markdown(arms, targets, json.loads(meta.read_text()) if meta.exists() else None)
    (out / "leaderboard.md").write_text(text)
    png = plot(arms, targets, out / "leaderboard.png")
    return {"markdown": text, "files": {"leaderboard.md": out / "leaderboard.md", "leaderboard.png": png}}


def command(args, targets: list[float] | None) -> int:
    """``seafl report --extract OUT`` and ``seafl report --leaderboard`` (cli.py's report command hands them here)."""
    if args.extract:
        if len(args.dirs) != 1 or args.leaderboard:
            raise ConfigError("--extract takes one sweep dir and no --leaderboard; extract first, then report the "
                              "extract with --leaderboard")
        written = extract(args.dirs[0], args.extract, args.commit)
        print(f"extracted {len(written)} finished run(s) of {args.dirs[0]} into {args.extract}", file=sys.stderr)
        return 0
    from seafl_dist.report.build import default_targets
    out = Path(args.out) if args.out else Path(args.dirs[0])
    result = write_leaderboard(args.dirs, out, targets or default_targets(args.dirs, find_runs(args.dirs)))
    print(result["markdown"])
    print("wrote " + ", ".join(str(p) for p in result["files"].values()), file=sys.stderr)
    return 0
