"""The attacks and the defense that docs/robustness.md's MNIST grid leaves out, each once on the bundled digits
(issue 65): Min-Max, Min-Sum, label flipping and the backdoor, without a defense and against Bulyan (f = 1,
K = 7 = 4f + 3), with 20% malicious devices on FedBuff, beside the same run without an attack, with and without
Bulyan (what Bulyan costs by itself). The quickstart with

    devices.num=20 devices.concurrency=10 algorithm.name=fedbuff algorithm.buffer_size=7 train.epochs=1
    run.max_aggregations=30 runtime.threads=1 threats.malicious=0.2

and each attack at its ``threats.*`` defaults (Min-Max and Min-Sum: the perturbation ``std``; the backdoor: half of
each malicious shard given a 3-pixel trigger and the label 0). One run each, in this process, one after the other:

    python benchmarks/attacks_digits.py --out /tmp/attacks_digits

Per arm: the accuracy at 10, 20 and 30 aggregations and the best; the backdoor's success rate at 0 (the initial
model), 10, 20 and 30 aggregations (``backdoor_asr``: the share of the triggered test images, their label not the
target, classified as the target; only a backdoor run scores it); the malicious and honest updates Bulyan dropped
(of those aggregated); the wall time.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from asyncfilter_digits import run_arms

BASE = ["devices.num=20", "devices.concurrency=10", "algorithm.name=fedbuff", "algorithm.buffer_size=7",
        "train.epochs=1", "run.max_aggregations=30", "runtime.threads=1", "logging.progress=none",
        "threats.malicious=0.2"]
BULYAN = ["algorithm.defense.name=bulyan", "algorithm.defense.f=1"]
ARMS = {"no attack (`threats.attack=none`)": ["threats.attack=none"],
        "no attack, `bulyan` (f = 1)": ["threats.attack=none", *BULYAN]}
for attack in ("min_max", "min_sum", "label_flip", "backdoor"):
    ARMS[f"`{attack}`, no defense"] = [f"threats.attack={attack}"]
    ARMS[f"`{attack}`, `bulyan` (f = 1)"] = [f"threats.attack={attack}", *BULYAN]


def row(name: str, out: Path, wall: float) -> str:
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    acc = {int(r["version"]): float(r["accuracy"]) for r in rows}
    asr = {int(r["version"]): float(r["backdoor_asr"]) for r in rows if r.get("backdoor_asr") not in (None, "")}
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    ups = [u for e in events if e["event"] == "aggregate" for u in e["updates"]]
    mal = [u for u in ups if u.get("malicious")]
    hon = [u for u in ups if not u.get("malicious")]
    dropped = lambda us: sum(1 for u in us if u["rejected"])  # noqa: E731
    defended = "bulyan" in name
    return (f"| {name} | {' / '.join(f'{acc[v]:.3f}' for v in (10, 20, 30))} | {max(acc.values()):.3f} | "
            f"{' / '.join(f'{asr[v]:.3f}' for v in (0, 10, 20, 30)) if asr else '–'} | "
            f"{f'{dropped(mal)} of {len(mal)}' if defended else f'– ({len(mal)} aggregated)'} | "
            f"{f'{dropped(hon)} of {len(hon)}' if defended else '–'} | {wall:.1f} s |")


def main(argv=None) -> int:
    return run_arms(__doc__.split("\n")[0], ["run", "accuracy at 10 / 20 / 30 aggregations", "best",
                                             "backdoor success at 0 / 10 / 20 / 30", "malicious updates dropped",
                                             "honest ones", "wall time"], ARMS, BASE, row, argv)


if __name__ == "__main__":
    raise SystemExit(main())
