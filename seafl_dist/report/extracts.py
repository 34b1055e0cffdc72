"""The extract (docs/leaderboard.md, docs/robustness.md): a sweep's finished runs as small files a repository can
hold, and the commit that made each.

    seafl report runs/leaderboard-mnist --extract docs/leaderboard/mnist --commit 9f4ef74

It owns :func:`extract`: of each finished run of a sweep dir, its ``config.yaml``, ``summary.json`` and
``metrics.csv`` as they are, and ``trace.json``: the figures of its trace (``events.jsonl``, too large to commit)
that say why an arm leads (:func:`trace_figures`) and what its attackers got (report/robustness.py's
``threat_figures``). Beside them the sweep's ``sweep.json`` (so the extract reads as the sweep: its labels,
targets, baseline) and ``leaderboard.json``: the commit that made each run (:func:`run_commits`) and the machine
time of the sweep (the sum of its runs' wall times). ``seafl report`` reads an extract as it reads the sweep dir.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

from seafl_dist.report.robustness import threat_figures
from seafl_dist.report.runs import find_runs
from seafl_dist.report.sinks import read_events

SMALL_FILES = ("config.yaml", "summary.json", "metrics.csv")


def trace_figures(events: list[dict], buffer_size: int, virtual_time: float) -> dict:
    """What a run's trace says about its pace, from its events:

    - ``aggregations_per_100s``: aggregations per 100 virtual seconds of the run;
    - ``mean_staleness``: over the updates aggregated and not rejected;
    - ``weighted_staleness``: the same mean, each update weighted by the weight its rule gave it (its ``weight``
      in the aggregate event): below ``mean_staleness`` where the rule gives stale updates less say;
    - ``waiting_share``: the share of the run's virtual time the server waited on the staleness limit β, with
      K = ``buffer_size`` updates already in: summed over aggregations, the aggregation's time less the time its
      buffer first held K updates (the K-th earliest arrival, ``finish``, among the updates it aggregated; the
      buffer is empty after each aggregation and every update in it is aggregated, SPEC's server loop).
    """
    arrived = {(e["device"], e["job"]): e["time"] for e in events if e["event"] == "finish"}
    aggregations, waited, count, stale, weight, weighted = 0, 0.0, 0, 0.0, 0.0, 0.0
    for e in events:
        if e["event"] != "aggregate":
            continue
        aggregations += 1
        times = sorted(arrived[(u["device"], u["job"])] for u in e["updates"])
        if len(times) >= buffer_size:
            waited += e["time"] - times[buffer_size - 1]
        for u in e["updates"]:
            if u.get("rejected"):
                continue
            count += 1
            stale += u["staleness"]
            w = abs(float(u.get("weight") or 0.0))
            weight += w
            weighted += w * u["staleness"]
    return {"aggregations_per_100s": 100.0 * aggregations / virtual_time if virtual_time > 0 else math.nan,
            "mean_staleness": stale / count if count else math.nan,
            "weighted_staleness": weighted / weight if weight > 0 else math.nan,
            "waiting_share": waited / virtual_time if virtual_time > 0 else math.nan}


def git_commit() -> str:
    """The commit of the checkout this package runs from, short; ``unknown`` outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def extract(sweep_dir: str | Path, out: str | Path, commit: str | None = None) -> list[Path]:
    """Copy each finished run of ``sweep_dir`` into ``out`` as its small files and its ``trace.json``; write
    ``out``'s ``sweep.json`` (the sweep's, with the extracted runs only) and ``leaderboard.json``. A run not
    completed (interrupted, failed, still running) is left out; ``leaderboard.json`` counts the runs kept
    beside the sweep's. An extract already in ``out`` keeps its runs that ``sweep_dir`` does not hold finished (a
    sweep continued on another machine, in another sweep dir, or at a later commit for arms added since): they stay,
    each with its own wall time and the commit that made it (``leaderboard.json``'s ``run_commits``; the same run
    extracted again, its summary unchanged, keeps its commit; a run made again takes the new one). Returns the run
    dirs written."""
    sweep_dir, out = Path(sweep_dir), Path(out)
    meta_path = sweep_dir / "sweep.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"'{sweep_dir}' holds no sweep.json: give a sweep dir (seafl sweep's --out)")
    meta = json.loads(meta_path.read_text())
    done = {r.dir.name: r for r in find_runs([sweep_dir]) if r.status == "completed"}
    commit = commit or git_commit()
    before = run_commits(out)
    out.mkdir(parents=True, exist_ok=True)
    written, wall, commits = [], 0.0, {}
    for entry in meta.get("runs", []):
        run = done.get(entry["name"])
        if run is None:
            kept = out / entry["name"]
            if entry["name"] in before and all((kept / f).exists() for f in (*SMALL_FILES, "trace.json")):
                wall += float(json.loads((kept / "summary.json").read_text()).get("wall_time_s") or 0.0)
                written.append(kept)
                commits[entry["name"]] = before[entry["name"]]
            continue
        dest = out / entry["name"]
        same = entry["name"] in before and (dest / "summary.json").exists() and \
            (dest / "summary.json").read_bytes() == (run.dir / "summary.json").read_bytes()
        dest.mkdir(exist_ok=True)
        for name in SMALL_FILES:
            shutil.copyfile(run.dir / name, dest / name)
        k, events = int(run.config["algorithm.buffer_size"]), read_events(run.dir / "events.jsonl")
        trace = {**trace_figures(events, k, float(run.summary["virtual_time"])), **threat_figures(events)}
        (dest / "trace.json").write_text(json.dumps(trace, indent=1, sort_keys=True) + "\n")
        wall += float(run.summary.get("wall_time_s") or 0.0)
        written.append(dest)
        commits[entry["name"]] = before[entry["name"]] if same else commit
    kept = {d.name for d in written}
    (out / "sweep.json").write_text(json.dumps({**meta, "runs": [r for r in meta.get("runs", []) if r["name"] in kept]},
                                               indent=1) + "\n")
    (out / "leaderboard.json").write_text(json.dumps(
        {"run_commits": commits, "machine_time_s": round(wall, 1), "runs": len(written),
         "runs_in_sweep": len(meta.get("runs", []))}, indent=1, sort_keys=True) + "\n")
    return written


def run_commits(extract_dir: str | Path) -> dict[str, str]:
    """Each run of an extract and the commit that made it ({} where ``extract_dir`` holds no extract)."""
    path = Path(extract_dir) / "leaderboard.json"
    return dict(json.loads(path.read_text())["run_commits"]) if path.exists() else {}
