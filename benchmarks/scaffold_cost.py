"""What SCAFFOLD's control variates (``algorithm.name: scaffold``; train/controls.py, runtime/controls.py) cost on
the CPU (issue 66, 7): the local step, a worker's memory of c_i, and the bytes of a download and an upload.

    python benchmarks/scaffold_cost.py [--threads 1] [--reps 7] [--samples 256] [--resnet-width 1.0]

**Step.** For LeNet-5 (28x28x1) and ResNet-18 (32x32x3, ``--resnet-width``) it trains the same job (``--samples``
random images, batch 32, E = 1, plain SGD lr 0.01: the only optimiser scaffold takes) as ``train_job`` trains every
simulated job, and as a scaffold job trains it (runtime/controls.py ``JobControls``: the download split into w and
c, the correction c − c_i laid onto the parameters, g − c_i + c at every step, then Δc_i = (x − y)/(K·η_l) − c and
the upload y followed by Δc_i), interleaved, ``--reps`` times after a warm-up, and prints side by side the median
CPU time per optimiser step of each and their ratio (the aim: at most 1.3x). The per-job work is inside the timing:
a job is what a device runs. CPU seconds of this process, not wall time: they hardly move when other processes
share the cores.

**Memory.** c_i is 4 bytes a trainable parameter a device, on the worker that trains it (float32, CPU): measured
for LeNet-5 at 1,000 devices (the device state's ``controls_nbytes`` after 1,000 accepted jobs of distinct devices),
computed as 4 · P · N for the rest (ResNet-18 at 10,000 devices would be 447 GB: it is not allocated).

**Bytes.** A download is the float32 model (parameters, statistics, counters: d entries) and c (P entries), an
upload the trained model and Δc: 4·(d + P) bytes each way, against 4·d for the other rules.
"""
from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

from seafl_dist.codecs import ErrorFeedback
from seafl_dist.data import ArrayDataset
from seafl_dist.models import build_model
from seafl_dist.runtime.controls import JobControls
from seafl_dist.settings import TrainConfig, config_from_dict
from seafl_dist.train import FlatLayout, StepPlan, flatten, train_job

MODELS = {"LeNet-5": ("lenet5", 1, 28), "ResNet-18": ("resnet18", 3, 32)}
BATCH, LR = 32, 0.01


def images(n: int, channels: int, size: int) -> ArrayDataset:
    g = torch.Generator().manual_seed(0)
    return ArrayDataset(torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10, "random", (0.5,) * channels, (0.25,) * channels)


def plain_job(net, start, data, idx) -> torch.Tensor:
    return train_job(net, start, data, idx, epochs=1, batch_size=BATCH, seed=0)


def scaffold_job(net, controls: JobControls, job: int, download, data, idx) -> torch.Tensor:
    controls.state.started(job, 0)
    out = controls.train(lambda spec, w, step: train_job(net, w, data, idx, epochs=1, batch_size=BATCH, seed=0,
                                                         control=step), SimpleNamespace(job=job, device=0), download)
    controls.state.taken(job, accepted=False)  # c_0 stays as it was: every rep trains the same job
    return out


def timed(fn) -> tuple[float, torch.Tensor]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def memory_row(label: str, n_params: int, measured: int | None) -> str:
    cells = [f"{4 * n_params * n / 1e9:.2f} GB" for n in (1_000, 10_000)]
    if measured is not None:
        cells[0] = f"{measured / 1e9:.3f} GB (measured)"
    return f"| {label} | {n_params:,} | {cells[0]} | {cells[1]} |"


def lenet_controls_bytes(n_params: int, devices: int = 1_000) -> int:
    """The device state after one accepted job of each of ``devices`` devices: its controls part's bytes."""
    state = ErrorFeedback()
    for d in range(devices):
        state.started(d, d)
        state.trained(d, torch.full((n_params,), 1e-3))
        state.taken(d, accepted=True)
    return state.controls_nbytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--resnet-width", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    optim = TrainConfig(lr=LR, momentum=0.0)
    cfg = config_from_dict({"algorithm": {"name": "scaffold"}, "train": {"lr": LR, "momentum": 0.0}})
    steps_rows, memory_rows, bytes_rows = [], [], []
    for label, (name, channels, size) in MODELS.items():
        width = args.resnet_width if name == "resnet18" else 1.0
        net = build_model(name, 10, channels, width=width, image_size=size, lightning=False, optim=optim)
        start, layout = flatten(net), FlatLayout.of(net)
        n_params = int(layout.mask("param").sum())
        g = torch.Generator().manual_seed(1)
        c = 1e-3 * torch.randn(n_params, generator=g)
        state = ErrorFeedback()
        state.controls[0] = 1e-3 * torch.randn(n_params, generator=g)
        controls = JobControls(SimpleNamespace(cfg=cfg), layout, state)
        download = torch.cat([start, c])
        data, idx = images(args.samples, channels, size), torch.arange(args.samples)
        steps = StepPlan(idx, 1, BATCH, 0).steps
        times: dict[str, list[float]] = {"plain": [], "scaffold": []}
        outs = {}
        for rep in range(args.reps + 1):  # rep 0 warms up; the order alternates so drift hurts both alike
            for kind in (("plain", "scaffold") if rep % 2 else ("scaffold", "plain")):
                t, outs[kind] = timed(lambda: plain_job(net, start, data, idx) if kind == "plain" else
                                      scaffold_job(net, controls, rep, download, data, idx))
                if rep:
                    times[kind].append(t / steps)
        assert outs["scaffold"].numel() == start.numel() + n_params
        assert not torch.equal(outs["plain"], outs["scaffold"][:start.numel()])  # the correction did run
        plain, corrected = statistics.median(times["plain"]), statistics.median(times["scaffold"])
        name_w = label if width == 1.0 else f"{label} width {width:g}"
        steps_rows.append(f"| {name_w} ({n_params:,}) | {plain * 1e3:.1f} ms | {corrected * 1e3:.1f} ms | "
                          f"{corrected / plain:.3f}x |")
        measured = lenet_controls_bytes(n_params) if name == "lenet5" else None
        if measured is not None:
            assert measured == 4 * n_params * 1_000
        memory_rows.append(memory_row(name_w, n_params, measured))
        d = start.numel()
        bytes_rows.append(f"| {name_w} | {4 * d:,} | {4 * (d + n_params):,} | {4 * (d + n_params):,} | "
                          f"{(d + n_params) / d:.3f}x |")
    print("| model (trainable parameters) | plain SGD step | scaffold step | ratio |\n|---|---|---|---|")
    print("\n".join(steps_rows))
    print(f"\n{args.reps} jobs of {steps} steps (batch {BATCH}) each, median CPU time per step, "
          f"{args.threads} thread(s), torch {torch.__version__}\n")
    print("| model | trainable parameters P | c_i of 1,000 devices | c_i of 10,000 devices |\n|---|---|---|---|")
    print("\n".join(memory_rows))
    print("\n4 bytes a parameter a device (float32, on the worker that trains it); computed as 4·P·N unless measured\n")
    print("| model | other rules, each way (4·d) | scaffold download (w, c) | scaffold upload (y, Δc) | ratio |\n"
          "|---|---|---|---|---|")
    print("\n".join(bytes_rows))


if __name__ == "__main__":
    main()
