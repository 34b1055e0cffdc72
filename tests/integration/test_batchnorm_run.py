"""SEAFL on a batch-norm model end to end: the importance factor is not the same for every update.

Before the counters were kept out of Eq. 5's cosine, ResNet-18's ``num_batches_tracked`` entries
dominated it: every update scored cos ≈ 0.96-0.9999 and got the same s (issue: importance
weights constant on the paper's CIFAR/CINIC models).
"""
import json
import subprocess
import sys
from pathlib import Path

from seafl_dist.report.trace import check_run
from small_runs import QUICKSTART, SMALL

ROOT = Path(__file__).resolve().parents[2]


def test_seafl_on_resnet18_scores_updates_differently(tmp_path):
    out = tmp_path / "rn"
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, "run.max_aggregations=3",
                           "model.name=resnet18", "model.width=0.125", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert check_run(out) == []
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    updates = [u for e in events if e["event"] == "aggregate" for u in e["updates"]]
    cos = [u["cos"] for u in updates]
    assert len(updates) >= 6 and all(abs(c) < 0.5 for c in cos)  # with the counters in: all > 0.9
    assert len({round(u["s"], 6) for u in updates}) > 1
