"""A Hugging Face dataset split by a Flower Datasets partitioner under torchrun W = 3 (issue 54 D): every rank
opens the saved dataset and asks Flower for the same partitions, and the run dir is the one process's byte for
byte, the sources' test text and one torchrun launch in all."""
import json
import os
import subprocess

import pytest
import torch

pytest.importorskip("datasets")
pytest.importorskip("flwr_datasets")

from hf_datasets import image_dataset  # noqa: E402
from launching import clean_env, torchrun_cmd  # noqa: E402
from small_runs import QUICKSTART, SMALL  # noqa: E402
from seafl_dist.cli import main as seafl_main  # noqa: E402
from seafl_dist.data import clear_cache  # noqa: E402
import user_extensions  # noqa: E402

pytestmark = pytest.mark.dist


def test_three_ranks_give_the_one_process_bytes(tmp_path, monkeypatch):
    mods = tmp_path / "mods"
    mods.mkdir()
    name, data = user_extensions.write(mods), image_dataset(tmp_path)
    flower = {"partition_by": "label", "alpha": 0.3, "seed": 5, "min_partition_size": 5}
    args = [*SMALL, f"data.name=hf:{data}", f"model.name={name}:tiny_mlp", "data.partition=flwr:DirichletPartitioner",
            f"data.partition_args={json.dumps(flower)}"]
    monkeypatch.syspath_prepend(str(mods))
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            assert seafl_main(["run", str(QUICKSTART), *args, "--out", str(tmp_path / "w1")]) == 0
    finally:
        torch.set_num_threads(threads)
        clear_cache()
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(mods)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(torchrun_cmd(3, *args, "--out", tmp_path / "w3"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "on 3 ranks" in proc.stderr
    for file in ["events.jsonl", "metrics.csv", "model.pt", "partition.json"]:
        assert (tmp_path / "w1" / file).read_bytes() == (tmp_path / "w3" / file).read_bytes(), file
    assert json.loads((tmp_path / "w3" / "partition.json").read_text())["method"] == "flwr:DirichletPartitioner"
