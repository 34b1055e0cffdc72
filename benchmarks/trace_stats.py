"""What a run's trace says about why it took the time it did, one row per run (docs/REPRODUCTION.md,
"What reproduces on CIFAR-10"):

    python benchmarks/trace_stats.py RUN_DIR [RUN_DIR ...] [--until SECONDS]

From ``events.jsonl`` up to ``--until`` virtual seconds (default: the whole run):

- ``aggs``: aggregations; ``jobs``: finished jobs; ``stale``: their mean staleness;
- ``notified``: jobs notified to stop early (partial training) and ``saved``: the local epochs that
  spared (E minus the epochs each notified job trained);
- ``wait``: virtual seconds the server held a full buffer (K or more updates) without aggregating,
  summed over aggregations: an aggregation's wait is its time minus the finish time of the K-th update
  it takes (its updates in finish order). With β = ∞ nothing blocks, so it is 0; under a staleness
  limit it is the time spent waiting on a straggler;
- ``moved``: SEAFL's importance factor (Eq. 5, s_k) against the same aggregation without it (μ = 0):
  the largest and the mean |w_k(μ) − w_k(0)| of the normalised weights d_k (γ_k + s_k) / Σ, over the
  updates that carry γ_k and s_k (SEAFL and SEAFL²; ``-`` for the others).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml


def events_of(run: Path, until: float | None) -> list[dict]:
    out = []
    with open(run / "events.jsonl") as f:
        for line in f:
            e = json.loads(line)
            if until is None or e["time"] <= until:
                out.append(e)
    return out


def stats(events: list[dict], buffer_size: int, epochs: int) -> dict:
    finished = {}
    notified, saved, waits, moved = 0, 0, [], []
    staleness = []
    for e in events:
        if e["event"] == "finish":
            finished[(e["device"], e["job"])] = e["time"]
        elif e["event"] == "notify":
            notified += 1
            saved += epochs - e["epochs"]
        elif e["event"] == "aggregate":
            ups = [u for u in e["updates"] if not u.get("rejected")]
            times = sorted(finished[(u["device"], u["job"])] for u in e["updates"])
            if len(times) >= buffer_size:
                waits.append(e["time"] - times[buffer_size - 1])
            staleness += [u["staleness"] for u in e["updates"]]
            if ups and all(u.get("gamma") is not None and u.get("s") is not None for u in ups):
                total = sum(u["n_samples"] for u in ups)
                with_s = [u["n_samples"] / total * (u["gamma"] + u["s"]) for u in ups]
                without = [u["n_samples"] / total * u["gamma"] for u in ups]
                a, b = sum(with_s), sum(without)
                moved += [abs(x / a - y / b) for x, y in zip(with_s, without)]
    return {"aggs": sum(e["event"] == "aggregate" for e in events), "jobs": len(finished),
            "stale": sum(staleness) / len(staleness) if staleness else 0.0, "notified": notified,
            "saved": saved, "wait": sum(waits), "moved": (max(moved), sum(moved) / len(moved)) if moved else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--until", type=float, default=None)
    args = ap.parse_args()
    print("| run | aggs | jobs | mean staleness | notified | epochs saved | server wait (s) | weight moved by s_k (max / mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        r = stats(events_of(run, args.until), cfg["algorithm"]["buffer_size"], cfg["train"]["epochs"])
        moved = "-" if r["moved"] is None else f"{r['moved'][0]:.4f} / {r['moved'][1]:.4f}"
        print(f"| {run.name} | {r['aggs']} | {r['jobs']} | {r['stale']:.2f} | {r['notified']} | {r['saved']} | "
              f"{r['wait']:.1f} | {moved} |")


if __name__ == "__main__":
    main()
