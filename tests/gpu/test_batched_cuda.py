"""runtime.batch_jobs on CUDA (skipped without a GPU): each job of a fused group matches the job
trained alone (fp32, TF32 off), bf16 autocast inside the fused step trains, a G = 4 run trains
what G = 1 trains (evaluations, weights, model, up to rounding), and running out of GPU memory
with a large G ends in one line naming runtime.batch_jobs and a value that fits, not a CUDA
traceback.

    PYTHONPATH=$PWD python3 -m pytest -q tests/gpu -s
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fake_datasets import write_cifar

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
SHARDS, EPOCHS = [64, 45, 33, 20], [2, 1, 2, 3]


def rel_l2(a, b):
    return float((a - b).norm() / b.norm())


@pytest.fixture
def no_tf32():
    """TF32 rounds convolutions to 10 mantissa bits: compare true fp32 arithmetic."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def jobs_setup(name, width, tmp_path):
    from seafl_dist.settings import TrainConfig
    from seafl_dist.data import load_dataset
    from seafl_dist.models import build_model
    from seafl_dist.train import flatten
    write_cifar(tmp_path, per_batch=100)
    data = load_dataset("cifar10", root=tmp_path, train=True).to("cuda")
    lr = 0.05 if name == "lenet5" else 0.001  # where fp32 training is stable (tests/unit/test_batched_train.py)
    net = build_model(name, 10, 3, width=width, image_size=32, lightning=False,
                      optim=TrainConfig(lr=lr, momentum=0.9, weight_decay=5e-4))
    starts = []
    for j in range(len(SHARDS)):
        torch.manual_seed(j)
        starts.append(flatten(build_model(name, 10, 3, width=width, image_size=32, lightning=False)))
    shards = list(torch.arange(sum(SHARDS)).split(SHARDS))
    return net, starts, data, shards


@pytest.mark.parametrize("name,width", [("lenet5", 1.0), ("resnet18", 0.125), ("vgg16", 0.125), ("resnet18", 1.0)])
def test_fused_jobs_match_jobs_alone_on_cuda(tmp_path, no_tf32, name, width):
    """fp64: the same math, to the final fp32 rounding. fp32: no further from the lone job than
    a 1e-7 change of its start moves it (these tiny nets on noise amplify rounding), or 1e-4."""
    from seafl_dist.data import ArrayDataset
    from seafl_dist.train import train_job, train_jobs
    net, starts, data, shards = jobs_setup(name, width, tmp_path)
    kw = dict(batch_size=16, augment=True, device="cuda")

    class Float64(ArrayDataset):
        def batch(self, idx, **k):
            x, y = super().batch(idx, **k)
            return x.double(), y
    for dtype in (torch.float64, torch.float32):
        d = Float64(data.images, data.labels, 10, "f64", data.mean, data.std) if dtype == torch.float64 else data
        net = net.to(dtype)
        together = train_jobs(net, starts, d, shards, epochs=EPOCHS, seeds=[1, 2, 3, 4], **kw)
        errs, floors = [], []
        for j in range(len(SHARDS)):
            alone = train_job(net, starts[j], d, shards[j], epochs=EPOCHS[j], seed=j + 1, **kw)
            errs.append(rel_l2(together[j], alone))
            nudged = starts[j] * (1 + 1e-7 * torch.randn(starts[j].shape, generator=torch.Generator().manual_seed(j)))
            floors.append(rel_l2(train_job(net, nudged, d, shards[j], epochs=EPOCHS[j], seed=j + 1, **kw), alone))
        print(f"\n{name} width {width} {dtype} on {torch.cuda.get_device_name()}: relative L2 per job "
              + ", ".join(f"{e:.1e}" for e in errs) + " (start nudged by 1e-7: " + ", ".join(f"{e:.1e}" for e in floors) + ")")
        if dtype == torch.float64:
            assert max(errs) <= 1e-6
        else:
            assert all(e <= max(1e-4, 10 * f) for e, f in zip(errs, floors))


def test_bf16_autocast_in_the_fused_step(tmp_path):
    from seafl_dist.train import train_job, train_jobs
    net, starts, data, shards = jobs_setup("resnet18", 0.25, tmp_path)
    kw = dict(batch_size=16, augment=True, device="cuda")
    fp32 = [train_job(net, s, data, i, epochs=e, seed=j, **kw) for j, (s, i, e) in enumerate(zip(starts, shards, EPOCHS))]
    bf16 = train_jobs(net, starts, data, shards, epochs=EPOCHS, seeds=[0, 1, 2, 3], precision="bf16", **kw)
    for a, b, s in zip(fp32, bf16, starts):
        assert torch.isfinite(b).all()
        assert rel_l2(b, a) < 0.2 * rel_l2(a, s)  # bf16 rounding, far smaller than what training moved


def seafl_run(args, cwd, prefix=()):
    code = ("import sys, torch; " + "; ".join(prefix) + "; from seafl_dist.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code, "run", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def test_batched_run_trains_as_g1_on_cuda(tmp_path):
    """The fused vmap step (runtime.cuda_graphs=false): what G = 4 trained (every evaluation,
    aggregation weight, the final model) is G = 1's up to fp32 rounding, TF32 off in both (the
    schedule cannot differ: it is computed before training). Graph slots give G = 1's bytes
    (test_reproducible.py)."""
    import trained
    small = [str(ROOT / "configs" / "quickstart.yaml"), "devices.num=10", "devices.concurrency=4",
             "algorithm.buffer_size=2", "train.epochs=2", "run.max_aggregations=6", "runtime.device=cuda",
             "logging.progress=none", "algorithm.name=seafl2", "algorithm.staleness_limit=1", "run.seed=2",
             "train.lr=0.02", "runtime.cuda_graphs=false"]
    no_tf32 = ["torch.backends.cudnn.allow_tf32 = False", "torch.backends.cuda.matmul.allow_tf32 = False"]
    for g in (1, 4):
        t0 = time.perf_counter()
        proc = seafl_run([*small, f"runtime.batch_jobs={g}", "--out", str(tmp_path / f"g{g}")], tmp_path, no_tf32)
        assert proc.returncode == 0, proc.stderr[-3000:]
        print(f"\nG={g}: {time.perf_counter() - t0:.1f} s")
    # on CPU: accuracies equal, the model 3e-3 apart; a fused step without momentum: 0.36 and 0.26
    trained.assert_trained_alike(tmp_path / "g1", tmp_path / "g4", accuracy=0.05, model=0.05, weight=5e-3,
                                 evaluations=7, learned=0.4)


def test_out_of_memory_with_a_large_group_names_the_key(tmp_path):
    write_cifar(tmp_path, per_batch=400)  # 2,000 training images
    args = [str(ROOT / "configs" / "cifar10_resnet18.yaml"), f"data.root={tmp_path}", "devices.num=16",
            "devices.concurrency=16", "algorithm.buffer_size=16", "train.epochs=1", "run.max_aggregations=1",
            "runtime.batch_jobs=16", "runtime.device=cuda", "logging.progress=none", "--out", str(tmp_path / "run")]
    # a small memory cap makes 16 full-width ResNet-18 jobs at once not fit, whatever the GPU
    cap = 3.0 * 2**30 / torch.cuda.get_device_properties(0).total_memory
    proc = seafl_run(args, tmp_path, prefix=[f"torch.cuda.set_per_process_memory_fraction({cap:.4f})"])
    lines = [ln for ln in proc.stderr.splitlines() if "runtime.batch_jobs=" in ln]
    print("\n" + "\n".join(lines))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines and "out of GPU memory" in lines[0] and "Traceback" not in proc.stderr
