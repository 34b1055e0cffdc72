"""Resident memory of each torchrun rank on CIFAR-10-sized data.

    python benchmarks/memory.py [--data data/bench-cifar10] [--world 3]

Writes (once) synthetic CIFAR-10 in the real format, ``cifar-10-batches-py/`` with five
pickled training batches of 10,000 x 3x32x32 uint8 images and a test batch of 10,000 (the
real sizes: 150 MB + 30 MB of pixels), then runs a short distributed run on it (LeNet-5,
100 devices of 500 samples, so the shards cover the whole training set, 4 aggregations), once
per ``runtime.placement`` (``balanced``: every worker holds the training set; ``device``: a worker
holds only its devices' rows), and samples every rank's ``VmRSS`` from
``/proc/PID/status`` ten times a second. It prints, per rank, the largest ``VmRSS`` and
``RssAnon`` seen while the run trained (after the first job was handed out; ``RssAnon``
leaves out the shared library pages torch maps, about 0.7 GB of every rank's ``VmRSS``) and
the peak over the rank's life (``VmHWM``, which includes loading the data). The figures depend on the code on
``PYTHONPATH``: run it once with the old code and once with the new to compare.
"""
from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_cifar10(root: Path, per_batch: int = 10_000) -> Path:
    """cifar-10-batches-py as distributed: pickled dicts, rows of 3,072 bytes (R, G, B planes)."""
    base = root / "cifar-10-batches-py"
    if (base / "batches.meta").exists():
        return base
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        with open(base / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels, "data": data,
                         "filenames": [f"{name}_{j}.png" for j in range(per_batch)]}, f)
    with open(base / "batches.meta", "wb") as f:  # written last: its presence means the set is whole
        pickle.dump({"num_cases_per_batch": per_batch, "label_names": NAMES, "num_vis": 3072}, f)
    return base


def status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


def measure(data_root: Path, world: int, placement: str) -> dict[int, dict[str, int]]:
    out = Path(tempfile.mkdtemp(prefix="seafl-mem-"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           "-m", "seafl_dist", "run", str(ROOT / "configs" / "quickstart.yaml"), "data.name=cifar10",
           f"data.root={data_root}", "devices.num=100", "devices.concurrency=4", "algorithm.buffer_size=2",
           "data.samples_per_device=500", "train.epochs=1", "run.max_aggregations=4", "runtime.threads=1",
           "logging.progress=none", f"runtime.placement={placement}", "--out", str(out / "run")]
    # cwd: a fresh folder, so `-m seafl_dist` imports the code on PYTHONPATH, not a checkout in cwd
    proc = subprocess.Popen(cmd, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ranks: dict[int, dict[str, int]] = {}
    events = out / "run" / "events.jsonl"
    while proc.poll() is None:
        training = events.exists() and events.stat().st_size > 0
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        for pid in map(int, kids):
            r = rank_of(pid)
            if r is None:
                continue
            stats = ranks.setdefault(r, {"rss_training_kb": 0, "anon_training_kb": 0, "hwm_kb": 0})
            rss, anon, hwm = status_kb(pid, "VmRSS"), status_kb(pid, "RssAnon"), status_kb(pid, "VmHWM")
            if training and rss:
                stats["rss_training_kb"] = max(stats["rss_training_kb"], rss)
                stats["anon_training_kb"] = max(stats["anon_training_kb"], anon or 0)
            if hwm:
                stats["hwm_kb"] = max(stats["hwm_kb"], hwm)
        time.sleep(0.1)
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the run failed (exit {proc.returncode}):\n{err[-3000:]}")
    return ranks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT / "data" / "bench-cifar10"), help="where the synthetic CIFAR-10 goes")
    p.add_argument("--world", type=int, default=3, help="torchrun ranks (rank 0 + workers)")
    p.add_argument("--placement", nargs="+", default=["balanced", "device"], choices=["balanced", "device"],
                   help="the runtime.placement values to measure, one run each")
    args = p.parse_args()
    write_cifar10(Path(args.data))
    import seafl_dist
    print(f"code: {Path(seafl_dist.__file__).parent}; CIFAR-10-sized data (50,000 + 10,000 images), W = {args.world}")
    for placement in args.placement:
        ranks = measure(Path(args.data).resolve(), args.world, placement)
        print(f"runtime.placement={placement}")
        print("rank  role    VmRSS training (MB)  RssAnon training (MB)  peak VmHWM (MB)")
        for r in sorted(ranks):
            s = ranks[r]
            print(f"{r:>4}  {'server' if r == 0 else 'worker':<6}  {s['rss_training_kb'] / 1024:>19.0f}  "
                  f"{s['anon_training_kb'] / 1024:>21.0f}  {s['hwm_kb'] / 1024:>15.0f}")


if __name__ == "__main__":
    main()
