"""W1's bare side (benchmarks/w1_overhead.py): MNIST-format data and one plain PyTorch process.

    python benchmarks/w1_bare.py --jobs JOBS.json --data-root ROOT [--index I]

trains the jobs listed in JOBS.json (``[[n_samples, epochs], ...]``) with a plain ``nn.Module``
LeNet-5, SGD and cross-entropy on 1 thread, the same batch sizes and dropped last batch of one as
``train_job``, and prints one JSON line: time training starts, end, steps, jobs, CPU seconds. Its LeNet-5 and
local SGD are also what Flower's clients run in benchmarks/w1_flower.py.
"""
from __future__ import annotations

import argparse
import json
import struct
import time
from pathlib import Path

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


# ---- data ---------------------------------------------------------------------------------

def has_mnist(root: Path) -> bool:
    raw = root / "MNIST" / "raw"
    return all((raw / f).exists() or (raw / (f + ".gz")).exists() for f in FILES)


def write_synthetic(root: Path) -> None:
    """MNIST's four IDX files (big-endian header, uint8 payload), random pixels and labels."""
    import numpy as np

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 60000), ("t10k", 10000)):
        for kind, shape in (("images-idx3", (n, 28, 28)), ("labels-idx1", (n,))):
            hi = 256 if kind.startswith("images") else 10
            arr = rng.integers(0, hi, size=shape, dtype=np.uint8)
            header = struct.pack(">I", 0x0800 | arr.ndim) + b"".join(struct.pack(">I", d) for d in shape)
            (raw / f"{split}-{kind}-ubyte").write_bytes(header + arr.tobytes())


def mnist_or_synthetic(root: str, tmp: Path) -> tuple[Path, str]:
    """``root`` if it holds MNIST's IDX files, else synthetic ones written under ``tmp``; and what they are."""
    data_root = Path(root).resolve()
    if has_mnist(data_root):
        return data_root, f"the MNIST IDX files in {data_root}"
    write_synthetic(tmp / "data")
    return tmp / "data", f"synthetic MNIST-format IDX files in {tmp / 'data'} (no MNIST under {root})"


def read_idx_images(root: Path, split: str = "train"):
    """The images of ``split`` (train, t10k) as a uint8 tensor (n, 1, 28, 28), read as a bare script would."""
    import gzip

    import numpy as np
    import torch

    path = root / "MNIST" / "raw" / f"{split}-images-idx3-ubyte"
    data = path.read_bytes() if path.exists() else gzip.open(str(path) + ".gz").read()
    n, h, w = struct.unpack(">III", data[4:16])
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, 1, h, w).copy())


def read_idx_labels(root: Path, split: str = "train"):
    """The labels of ``split`` (train, t10k) as an int64 tensor."""
    import gzip

    import numpy as np
    import torch

    path = root / "MNIST" / "raw" / f"{split}-labels-idx1-ubyte"
    data = path.read_bytes() if path.exists() else gzip.open(str(path) + ".gz").read()
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=8).astype(np.int64))


# ---- a plain LeNet-5 and its local SGD (the bare side and Flower's clients use them) ----------

def lenet5():
    """LeNet-5 as a plain ``nn.Sequential`` (the layers of seafl_dist's ``lenet5``)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(inplace=True),
        nn.Linear(120, 84), nn.ReLU(inplace=True), nn.Linear(84, 10))


def normalise(images):
    """uint8 images to MNIST's normalised float32 inputs."""
    import torch

    return images.to(torch.float32).div_(255.0).sub_(0.1307).div_(0.3081)


def train_local(model, images, labels, shard, epochs: int, gen, *, lr: float, momentum: float,
                batch_size: int = 32) -> int:
    """E epochs of SGD over ``shard`` (indices into ``images``), reshuffled each epoch by ``gen``, the
    same batch sizes and dropped last batch of one as ``train_job``; returns the steps taken."""
    import torch
    import torch.nn.functional as F

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    n, steps = len(shard), 0
    for _ in range(epochs):
        order = shard[torch.randperm(n, generator=gen)]
        for lo in range(0, n, batch_size):
            idx = order[lo:lo + batch_size]
            if len(idx) == 1 and n > 1:  # train_job drops a last batch of one
                continue
            loss = F.cross_entropy(model(normalise(images.index_select(0, idx))), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
    return steps


# ---- (b) one bare process -------------------------------------------------------------------

def bare_worker(args) -> None:
    """Train the jobs in ``args.jobs`` (a JSON list of [n_samples, epochs]) with plain PyTorch."""
    import torch

    torch.set_num_threads(1)
    jobs = json.loads(Path(args.jobs).read_text())
    images = read_idx_images(Path(args.data_root))
    labels = torch.randint(0, 10, (len(images),), generator=torch.Generator().manual_seed(args.index))
    torch.manual_seed(0)
    model = lenet5()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(100 + args.index)
    first_step = None
    steps = 0
    for n, epochs in jobs:
        shard = torch.randperm(len(images), generator=gen)[:n]
        model.load_state_dict(start)
        first_step = first_step or time.time()
        steps += train_local(model, images, labels, shard, epochs, gen, lr=args.lr, momentum=args.momentum,
                             batch_size=args.batch_size)
        _ = torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # what a worker sends back
    print(json.dumps({"first_step": first_step, "end": time.time(), "steps": steps, "jobs": len(jobs),
                      "cpu": time.process_time()}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", required=True, help="a JSON list of [n_samples, epochs]")
    ap.add_argument("--data-root", required=True, help="holds MNIST/raw/")
    ap.add_argument("--index", type=int, default=0, help="this process's number (seeds its shards and labels)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch-size", type=int, default=32)
    bare_worker(ap.parse_args())
