"""A whole in-process run of the CIFAR-10 ResNet-18 config through the real server, counting every
image trained: the last rows of ``gpu_throughput.py`` (which imports this)."""
from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import numpy as np


def write_cifar(root: Path, n_train: int, n_test: int, seed=0) -> None:
    """Synthetic images in the real cifar-10-batches-py pickle format."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    per = -(-n_train // 5)
    for name, n in [(f"data_batch_{k}", per) for k in range(1, 6)] + [("test_batch", n_test)]:
        with open(base / name, "wb") as f:
            pickle.dump({"labels": rng.integers(0, 10, n).tolist(),
                         "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}, f)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{k}" for k in range(10)]}, f)


def full_run(args, g: int, root: Path, device) -> tuple[float, int, float]:
    """(images/s, jobs trained, wall s) of an in-process run of the CIFAR ResNet-18 workload."""
    from seafl_dist.settings import load_config
    from seafl_dist.runtime.executor import InProcessExecutor
    from seafl_dist.runtime.server import Server
    from seafl_dist.runtime.setup import prepare
    cfg_path = Path(__file__).resolve().parents[1] / "configs" / "cifar10_resnet18.yaml"
    s = args.full_scale
    over = [f"data.root={root}", f"devices.num={s['devices']}", f"devices.concurrency={s['concurrency']}",
            f"algorithm.buffer_size={s['k']}", f"run.max_aggregations={s['aggs'] if g > 1 else s['aggs_g1']}",
            f"runtime.batch_jobs={g}", f"model.width={args.width}", "logging.progress=none",
            f"runtime.device={device.type}", f"train.epochs={s['epochs']}", f"runtime.precision={args.full_precision}"]
    cfg = load_config(cfg_path, over)
    exp = prepare(cfg)
    executor = InProcessExecutor(exp)
    trained = []
    inner = executor.trainer.train

    def counting(specs, starts, on_step=None):
        trained.extend(specs)
        return inner(specs, starts, on_step)
    executor.trainer.train = counting
    with tempfile.TemporaryDirectory() as out:
        summary = Server(exp, executor, out).run()
    images = sum(len(exp.shards[sp.device]) * sp.epochs for sp in trained)
    return images / summary["wall_time_s"], len(trained), summary["wall_time_s"]
