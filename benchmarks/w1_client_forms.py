"""Forms of W1's local training a Flower user could write, and what each costs (the Flower client's choice).

    python benchmarks/w1_client_forms.py [--jobs 8] [--data-root DIR]    # CPU seconds a job, each form, both momenta

W1's local job (benchmarks/w1_flower.py): LeNet-5 from the global weights, E = 5 epochs of SGD (lr 0.01,
momentum 0 or 0.9) over a device's 600 MNIST-format images, B = 32, reshuffled every epoch; 95 steps.
Every form takes the same steps on the same batches; they differ only in how a PyTorch user writes them:

  index      batches gathered from the uint8 images by ``index_select`` and normalised batch by batch, SGD
             with torch's defaults (benchmarks/w1_bare.py's ``train_local``, the client until issue 33)
  loader     Flower's quickstart-pytorch shape: the shard normalised once into a ``TensorDataset``, a
             ``DataLoader(batch_size=32, shuffle=True)`` over it
  tensors    the shard normalised once, batches by indexing that tensor (no DataLoader)
  foreach    ``tensors`` with ``SGD(foreach=True)``: one multi-tensor update for all parameters
  fused      ``tensors`` with ``SGD(fused=True)``: torch's fused CPU kernel
  cl         ``fused`` with the model and images channels-last (the layout seafl's numerics version 2
             trains the built-in models in on a CPU)

Each job is timed in CPU seconds of this process on 1 torch thread, forms and momenta interleaved,
after one warm-up job each; medians printed. Imported by benchmarks/w1_flower_app.py (``FORMS``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from w1_bare import lenet5, mnist_or_synthetic, normalise, read_idx_images, read_idx_labels, train_local  # noqa: E402


def _epochs(n: int, epochs: int, gen, batch_size: int):
    """Each epoch's batches of positions 0..n-1, reshuffled by ``gen``; a last batch of one is dropped
    (as train_job does; 600 samples leave 24)."""
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for lo in range(0, n, batch_size):
            if n - lo > 1 or n == 1:
                yield order[lo:lo + batch_size]


def _tensors(model, images, labels, shard, epochs, gen, *, lr, momentum, batch_size=32, sgd=None, fmt=None):
    """The shard normalised once, batches by indexing it; ``sgd``: extra SGD keywords; ``fmt``: a layout."""
    x, y = normalise(images.index_select(0, shard)), labels[shard]
    if fmt is not None:
        model.to(memory_format=fmt)
        x = x.contiguous(memory_format=fmt)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, **(sgd or {}))
    steps = 0
    for idx in _epochs(len(shard), epochs, gen, batch_size):
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
    return steps


def _loader(model, images, labels, shard, epochs, gen, *, lr, momentum, batch_size=32):
    """Flower's quickstart-pytorch loop: a DataLoader over the normalised shard."""
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(normalise(images.index_select(0, shard)), labels[shard])
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, generator=gen)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    steps = 0
    for _ in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
    return steps


FORMS = {
    "index": train_local,
    "loader": _loader,
    "tensors": _tensors,
    "foreach": lambda *a, **kw: _tensors(*a, sgd={"foreach": True}, **kw),
    "fused": lambda *a, **kw: _tensors(*a, sgd={"fused": True}, **kw),
    "cl": lambda *a, **kw: _tensors(*a, sgd={"fused": True}, fmt=torch.channels_last, **kw),
}
LAYOUT = {"cl": torch.channels_last}  # a form's layout, which the Flower server's evaluation takes too
FASTEST = "fused"  # of the forms in PyTorch's default layout (docs/performance.md, "W1 against Flower")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=8, help="timed jobs of each form at each momentum")
    ap.add_argument("--data-root", default=str(Path(__file__).resolve().parents[1] / "data"),
                    help="holds MNIST/raw/ (else synthetic MNIST-format images)")
    ap.add_argument("--forms", default=",".join(FORMS), help="comma-separated, of: " + ", ".join(FORMS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    forms = args.forms.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root, source = mnist_or_synthetic(args.data_root, Path(tmp))
        images, labels = read_idx_images(root), read_idx_labels(root)
    torch.manual_seed(0)
    start = lenet5().state_dict()
    cpu = {(f, m): [] for f in forms for m in (0.0, 0.9)}
    for job in range(-1, args.jobs):  # job -1: a warm-up of each
        keys = list(cpu)
        for form, momentum in keys[job % len(keys):] + keys[:job % len(keys)]:
            model = lenet5()
            model.load_state_dict(start)
            shard = torch.arange(600 * (job + 1), 600 * (job + 2))
            c0 = time.process_time()
            steps = FORMS[form](model, images, labels, shard, 5, torch.Generator().manual_seed(job), lr=0.01,
                                momentum=momentum)
            if job >= 0:
                cpu[(form, momentum)].append(time.process_time() - c0)
            assert steps == 95, (form, steps)
    print(f"W1's local job (LeNet-5, 600 images, E=5, B=32: 95 steps), {source}; 1 torch thread; CPU seconds "
          f"a job, median of {args.jobs}")
    base = statistics.median(cpu[(forms[0], 0.0)])
    for form in forms:
        a, b = statistics.median(cpu[(form, 0.0)]), statistics.median(cpu[(form, 0.9)])
        print(f"  {form:8s} momentum 0: {a:.3f} s ({base / a:.2f}x {forms[0]})   momentum 0.9: {b:.3f} s "
              f"(momentum costs {100 * (b / a - 1):+.1f}%)")


if __name__ == "__main__":
    main()
