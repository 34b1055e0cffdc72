"""GPU runs reproduce with runtime.deterministic (skipped without CUDA): bytes, not tolerances.

- the same command twice: byte-identical events.jsonl and model.pt, at G = 1 and G = 4 (CUDA-graph
  slots), and G = 4 gives G = 1's bytes (a job trains to its own bits on any slot);
- a graph replays the eager step: runtime.cuda_graphs=false gives the same bytes;
- (torchrun W = 3 sharing the one GPU gives the one-process bytes: test_gpu_transport.py);
- ResNet-18 (channels-last, batch norm, augmentation) at G = 1 and G = 4: the same bytes;
- a model with an op that has no deterministic implementation stops before training, in one line.

    PYTHONPATH=$PWD python3 -m pytest -q tests/gpu -s
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fake_datasets import write_cifar
from user_extensions import NONDETERMINISTIC, write

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["devices.num=10", "devices.concurrency=4", "algorithm.buffer_size=2", "train.epochs=2",
         "run.max_aggregations=6", "runtime.threads=1", "runtime.device=cuda", "logging.progress=none",
         "runtime.deterministic=true"]


def env():
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e["CUDA_VISIBLE_DEVICES"] = e.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return e


def seafl_all(config, runs: dict, root: Path) -> dict:
    """Start one ``seafl run`` per entry of ``runs`` (name -> overrides) at once, wait for all;
    name -> its stderr. They share the GPU (each is small), so the test takes one run's time."""
    procs = {name: subprocess.Popen([sys.executable, "-m", "seafl_dist", "run", str(config), *args,
                                     "--out", str(root / name)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env(), cwd=root)
             for name, args in runs.items()}
    errs = {}
    for name, proc in procs.items():
        _, errs[name] = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {errs[name][-3000:]}"
    return errs


def same_bytes(a: Path, b: Path) -> None:
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{name} differs between {a.name} and {b.name}"


@pytest.mark.parametrize("name,width", [("lenet5", 1.0), ("resnet18", 0.25)])
def test_slots_replay_train_jobs_bits(name, width):
    """In-process: 3 graph slots, 5 jobs (trailing batches, a shard smaller than a batch) against
    train_job, deterministic algorithms on; byte for byte."""
    from seafl_dist.runtime import determinism
    from seafl_dist.settings import TrainConfig
    from seafl_dist.models import build_model
    from seafl_dist.train import flatten, train_job
    from seafl_dist.train.graphed import Slot, train_slots
    from seafl_dist.data import ArrayDataset
    shards_n, epochs = [48, 45, 33, 7, 20], [2, 1, 3, 2, 2]
    determinism.apply()
    try:
        g = torch.Generator().manual_seed(0)
        data = ArrayDataset(torch.randint(0, 256, (sum(shards_n), 3, 32, 32), dtype=torch.uint8, generator=g),
                            torch.randint(0, 10, (sum(shards_n),), generator=g), 10, "fake", (0.5,) * 3,
                            (0.25,) * 3).to("cuda")
        optim = TrainConfig(lr=0.05, momentum=0.9, weight_decay=5e-4)
        net = build_model(name, 10, 3, width=width, image_size=32, lightning=False, optim=optim)
        starts = []
        for j in range(len(shards_n)):
            torch.manual_seed(j)
            starts.append(flatten(build_model(name, 10, 3, width=width, image_size=32, lightning=False)))
        shards = list(torch.arange(sum(shards_n)).split(shards_n))
        slots = [Slot(net, data, 16, torch.device("cuda"), "32") for _ in range(3)]
        got = train_slots(slots, starts, data, shards, epochs=epochs, batch_size=16, seeds=[1, 2, 3, 4, 5],
                          augment=True)
        for j in range(len(shards_n)):
            alone = train_job(net, starts[j], data, shards[j], epochs=epochs[j], batch_size=16, seed=j + 1,
                              augment=True, device="cuda")
            assert torch.equal(got[j], alone), f"{name}: job {j} differs from train_job"
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False


def test_quickstart_twice_and_at_any_g_and_without_graphs(tmp_path):
    qs = ROOT / "configs" / "quickstart.yaml"
    runs = {"g1": [], "g1_again": [], "g4": ["runtime.batch_jobs=4"], "g4_again": ["runtime.batch_jobs=4"],
            "eager": ["runtime.cuda_graphs=false"]}
    errs = seafl_all(qs, {name: [*SMALL, *extra] for name, extra in runs.items()}, tmp_path)
    assert not any("training eagerly" in err for err in errs.values())
    same_bytes(tmp_path / "g1", tmp_path / "g1_again")
    same_bytes(tmp_path / "g4", tmp_path / "g4_again")
    same_bytes(tmp_path / "g1", tmp_path / "g4")
    same_bytes(tmp_path / "g1", tmp_path / "eager")


def test_resnet18_graph_slots_give_the_lone_job_bytes(tmp_path):
    write_cifar(tmp_path, per_batch=200)
    cfg = ROOT / "configs" / "cifar10_resnet18.yaml"
    args = [f"data.root={tmp_path}", "model.width=0.25", *SMALL, "run.max_aggregations=4"]
    seafl_all(cfg, {"g1": [*args, "runtime.batch_jobs=1"], "g4": [*args, "runtime.batch_jobs=4"],
                    "g4_again": [*args, "runtime.batch_jobs=4"]}, tmp_path)
    same_bytes(tmp_path / "g4", tmp_path / "g4_again")
    same_bytes(tmp_path / "g1", tmp_path / "g4")


def test_an_op_without_a_deterministic_implementation_stops_in_one_line(tmp_path):
    name = write(tmp_path, NONDETERMINISTIC)
    e = env()
    e["PYTHONPATH"] = str(tmp_path) + os.pathsep + e["PYTHONPATH"]
    proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(ROOT / "configs" / "quickstart.yaml"),
                           *SMALL, f"model.name={name}:put_mlp", "--out", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=300, env=e, cwd=tmp_path)
    print("\n" + proc.stderr.strip())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "runtime.deterministic" in line and "put_" in line and "cuda" in line
    assert not (tmp_path / "run" / "events.jsonl").exists()
