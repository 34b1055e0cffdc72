"""What error feedback's residuals add to a checkpoint (runtime/residuals.py), and per-worker torch.save files
against torch.distributed.checkpoint (DCP) for them.

    python benchmarks/residual_checkpoint.py [--dir DIR] [--resnet-devices 10] [--lenet-devices 1000] [--iters 2]

A residual is float32 over the trainable parameters, one per device: its bytes are arithmetic (printed for 100
ResNet-18 devices and 10,000 LeNet-5 devices, the sizes issue 52 asks about). The times are measured on a sample
of devices (``--resnet-devices``, ``--lenet-devices``, all in one process: W - 1 workers share the disk, so the
sum over workers is what the disk must take) and scaled linearly by bytes to the full counts. For each sample:
- ``torch.save``: checkpoint.atomic_save of ``{device: r_k}`` (temp file, fsync, rename, dir fsync), and the
  memory-mapped read of a quarter of the devices (what one worker of five reads on resume);
- ``DCP``: ``torch.distributed.checkpoint.save`` of the same tensors, one key a device, in one process (no
  process group: its planning and metadata without the collectives a real save adds), then ``dcp.load`` of the
  same quarter. Medians over ``--iters``. A script, not a test; docs/failures.md quotes its output.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from seafl_dist.models import build_model
from seafl_dist.runtime import checkpoint

MODELS = {"resnet18": dict(num_classes=10, in_channels=3, image_size=32),
          "lenet5": dict(num_classes=10, in_channels=1, image_size=28)}
FULL = {"resnet18": 100, "lenet5": 10_000}


def timed(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def params_of(name: str) -> int:
    with torch.device("meta"):
        model = build_model(name, **MODELS[name], lightning=False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def measure(name: str, devices: int, root: Path, iters: int) -> dict:
    n = params_of(name)
    gen = torch.Generator().manual_seed(0)
    res = {d: torch.randn(n, generator=gen) for d in range(devices)}
    quarter = list(range(0, devices, 4))
    path = root / "residuals-00000001-rank1.pt"

    def save_plain():
        checkpoint.atomic_save({"format": 1, "version": 1, "rank": 1, "residuals": res}, path)

    def load_plain():
        part = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["residuals"]
        return {d: part[d].clone() for d in quarter}

    def save_dcp():
        shutil.rmtree(root / "dcp", ignore_errors=True)
        dcp.save({f"residual/{d}": r for d, r in res.items()}, checkpoint_id=root / "dcp")

    def load_dcp():
        want = {f"residual/{d}": torch.empty(n) for d in quarter}
        dcp.load(want, checkpoint_id=root / "dcp")
        return want

    out = {"model": name, "params": n, "devices": devices, "bytes": 4 * n * devices,
           "save_plain": timed(save_plain, iters), "load_plain": timed(load_plain, iters)}
    out["file_plain"] = path.stat().st_size
    out["save_dcp"], out["load_dcp"] = timed(save_dcp, iters), timed(load_dcp, iters)
    out["file_dcp"] = sum(p.stat().st_size for p in (root / "dcp").iterdir())
    got = load_dcp()
    assert all(torch.equal(got[f"residual/{d}"], res[d]) for d in quarter)  # the same bits either way
    path.unlink()
    shutil.rmtree(root / "dcp")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on /tmp's disk)")
    ap.add_argument("--resnet-devices", type=int, default=10)
    ap.add_argument("--lenet-devices", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [measure("resnet18", args.resnet_devices, Path(tmp), args.iters),
                measure("lenet5", args.lenet_devices, Path(tmp), args.iters)]
    print("| model | MB a device | sample devices | torch.save write | DCP write | DCP / torch.save | "
          "read 1/4 (torch.load mmap) | read 1/4 (dcp.load) | full count | one checkpoint | on disk at once "
          "(3 checkpoints) | write at full count (torch.save, scaled) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        full = FULL[r["model"]]
        scale = full / r["devices"]
        print(f"| {r['model']} | {4 * r['params'] / 1e6:.2f} | {r['devices']} | {r['save_plain']:.2f} s | "
              f"{r['save_dcp']:.2f} s | {r['save_dcp'] / r['save_plain']:.2f} | {r['load_plain']:.2f} s | "
              f"{r['load_dcp']:.2f} s | {full:,} | {4 * r['params'] * full / 1e9:.2f} GB | "
              f"{3 * 4 * r['params'] * full / 1e9:.2f} GB | {r['save_plain'] * scale:.0f} s |")
        print(f"  files: torch.save {r['file_plain'] / 1e6:.1f} MB, DCP {r['file_dcp'] / 1e6:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
