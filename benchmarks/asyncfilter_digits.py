"""AsyncFilter once on the bundled digits with 20% sign-flip attackers, beside no defense and Krum (issue 65), as
docs/robustness.md's FLTrust and Zeno++ runs were made: the quickstart with

    devices.num=20 devices.concurrency=10 algorithm.name=fedbuff algorithm.buffer_size=5 train.epochs=1
    run.max_aggregations=30 runtime.threads=1 threats.malicious=0.2 threats.attack=sign_flip

and, per arm, the defense (Krum at f = 1, K = 5 = 2f + 3; AsyncFilter at its defaults), plus the same run without
an attack. One run each, in this process, one after the other:

    python benchmarks/asyncfilter_digits.py --out /tmp/asyncfilter_digits

Per arm: the accuracy at 10, 20 and 30 aggregations and the best, the malicious and honest updates the defense
dropped (of those aggregated), for AsyncFilter how many updates sat in a staleness group it screened (≥ group_min),
and the wall time.
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from collections import Counter
from pathlib import Path

from seafl_dist.cli import main as seafl_main

ROOT = Path(__file__).resolve().parents[1]
BASE = ["devices.num=20", "devices.concurrency=10", "algorithm.name=fedbuff", "algorithm.buffer_size=5",
        "train.epochs=1", "run.max_aggregations=30", "runtime.threads=1", "logging.progress=none"]
ATTACK = ["threats.malicious=0.2", "threats.attack=sign_flip"]
ARMS = {
    "no attack (`threats.attack=none`)": ["threats.malicious=0.2", "threats.attack=none"],
    "sign flip, no defense": ATTACK,
    "sign flip, `krum` (f = 1)": [*ATTACK, "algorithm.defense.name=krum", "algorithm.defense.f=1"],
    "sign flip, `asyncfilter`": [*ATTACK, "algorithm.defense.name=asyncfilter"],
}


def row(name: str, out: Path, wall: float) -> str:
    with open(out / "metrics.csv", newline="") as f:
        acc = {int(r["version"]): float(r["accuracy"]) for r in csv.DictReader(f)}
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    aggs = [e for e in events if e["event"] == "aggregate"]
    mal = [u for e in aggs for u in e["updates"] if u.get("malicious")]
    hon = [u for e in aggs for u in e["updates"] if not u.get("malicious")]
    dropped = lambda us: sum(1 for u in us if u["rejected"])  # noqa: E731
    screened = 0
    for e in aggs:
        sizes = Counter(u["staleness"] for u in e["updates"] if not (u["rejected"] and
                                                                     not str(u["reason"]).startswith("asyncfilter")))
        screened += sum(c for c in sizes.values() if c >= 3)
    at = " / ".join(f"{acc[v]:.3f}" for v in (10, 20, 30))
    drops = "–" if "defense" not in " ".join(ARMS[name]) else f"{dropped(mal)} of {len(mal)}"
    honest = "–" if "defense" not in " ".join(ARMS[name]) else f"{dropped(hon)} of {len(hon)}"
    extra = f" ({screened} of {len(mal) + len(hon)} in a group of ≥ 3)" if "asyncfilter" in name else ""
    return f"| {name} | {at} | {max(acc.values()):.3f} | {drops}{extra} | {honest} | {wall:.1f} s |"


def run_arms(description: str, head: list[str], arms: dict, base: list[str], row, argv=None) -> int:
    """Each arm of ``arms`` ({name: overrides}) once, in this process, one after the other: the quickstart with
    ``base`` and its overrides, into ``--out``/arm<i>; ``row(name, out, wall)`` its table line, printed as it comes,
    then the table (``head`` its columns). benchmarks/attacks_digits.py runs its arms here too."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, (name, overrides) in enumerate(arms.items()):
        out = args.out / f"arm{i}"
        start = time.perf_counter()
        assert seafl_main(["run", str(ROOT / "configs" / "quickstart.yaml"), *base, *overrides, "--out",
                           str(out)]) == 0, name
        lines.append(row(name, out, time.perf_counter() - start))
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))
    return 0


def main(argv=None) -> int:
    return run_arms(__doc__.split("\n")[0], ["run", "accuracy at 10 / 20 / 30 aggregations", "best",
                                             "malicious updates dropped", "honest ones", "wall time"],
                    ARMS, BASE, row, argv)


if __name__ == "__main__":
    raise SystemExit(main())
