"""Hugging Face datasets as the data and Flower Datasets' partitioners as the partition (issue 54 B, C, D).

An image dataset saved with save_to_disk and a text dataset of parquet files (builder + data.files), both made
here (tests/hf_datasets.py), run end to end; Flower's Dirichlet, Pathological and NaturalId partitioners give
each device exactly the rows flwr_datasets gives for the same arguments and seed; a killed run of the image set
under churn, device evaluation of held-out rows and W&B resumes to the uninterrupted bytes and reports; and
what does not fit is refused in one line."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("datasets")
pytest.importorskip("flwr_datasets")

from device_runs import CHURN, write_profile  # noqa: E402
import in_process  # noqa: E402
from hf_datasets import WRITERS, image_arrays, image_dataset, text_files, token_rows  # noqa: E402
from one_line import one_line_message  # noqa: E402
from resuming import assert_same_run, checkpoint_versions  # noqa: E402
from seafl_dist.data import ArrayDataset, clear_cache, load_dataset  # noqa: E402
from seafl_dist.data.samples import SampleDataset  # noqa: E402
from seafl_dist.runtime.setup import prepare  # noqa: E402
from seafl_dist.settings import ConfigError, config_from_dict  # noqa: E402
from small_runs import QUICKSTART, SMALL  # noqa: E402
import token_datasets  # noqa: E402
import user_extensions  # noqa: E402


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(folder on sys.path, image dataset dir, text files, the image model module, the token module)."""
    folder = tmp_path_factory.mktemp("hf")
    sys.path.insert(0, str(folder))
    clear_cache()
    yield (folder, image_dataset(folder), text_files(folder), user_extensions.write(folder),
           token_datasets.write(folder))
    sys.path.remove(str(folder))
    clear_cache()


def image_args(made):
    folder, images, _, mlp, _ = made
    return [f"data.name=hf:{images}", f"model.name={mlp}:tiny_mlp"]


def text_args(made):
    folder, _, files, _, tokens = made
    return ["data.name=hf:parquet", f"data.root={folder}", "data.files={train: %s, test: %s}" % (
            files["train"], files["test"]), "data.columns={input: ids, label: topic}", f"model.name={tokens}:char_lstm",
            "train.batch_size=8"]


def seafl(made, *args, out, env=None):
    folder = made[0]
    env = env or dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *args, "--out", str(out)],
                          env=env, cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.fixture
def here(made, monkeypatch):
    """``seafl`` (above) in this process, no interpreter start: a finished process (exit code, stdout, stderr).
    ``wandb_in``: W&B's settings in the environment as wandb_runs.offline_env makes them (no key, no network)."""
    def run(*args, out, wandb_in=None):
        monkeypatch.chdir(made[0])
        monkeypatch.delenv("SEAFL_FAULT", raising=False)
        if wandb_in is not None:
            from wandb_runs import offline_env
            for key in [k for k in os.environ if k.startswith("WANDB_")]:
                monkeypatch.delenv(key)
            for key, value in offline_env(wandb_in).items():
                if key.startswith("WANDB_") or key == "NETRC":
                    monkeypatch.setenv(key, value)
        return in_process.seafl("run", QUICKSTART, *SMALL, *args, "--out", out)
    return run


def test_both_sources_read_their_rows_through_the_datasets_own_formatting(made):
    images, labels, _ = image_arrays("train")
    train = load_dataset(f"hf:{made[1]}", "data", train=True)
    assert isinstance(train, ArrayDataset) and train.classes == ["a", "b", "c", "d"]  # the ClassLabel's names
    assert torch.equal(train.images, torch.from_numpy(images)) and train.labels.tolist() == labels.tolist()
    test = load_dataset(f"hf:{made[1]}", "data", train=False)
    assert torch.equal(test.images, torch.from_numpy(image_arrays("test")[0]))
    kw = dict(files={"train": made[2]["train"], "test": made[2]["test"]}, columns={"input": "ids", "label": "topic"})
    text = load_dataset("hf:parquet", made[0], train=True, **kw)
    assert isinstance(text, SampleDataset) and text.num_classes == 4
    x, y = text.batch(torch.tensor([5, 2]))
    rows = token_rows(400, 0)
    assert x.tolist() == rows[[5, 2]].tolist() and y.tolist() == (rows[[5, 2], -1] % 4).tolist()
    assert len(load_dataset("hf:parquet", made[0], train=False, **kw)) == 120


def test_pixels_stored_as_a_uint8_array_take_the_image_fast_path_as_uint8(tmp_path):
    """torch's formatting widens an Array2D of uint8 to int64; declared uint8, it is uint8 pixels again."""
    import datasets
    images = np.random.default_rng(3).integers(0, 256, (6, 8, 8), dtype=np.uint8)
    features = datasets.Features({"image": datasets.Array2D((8, 8), "uint8"), "label": datasets.Value("int64")})
    split = datasets.Dataset.from_dict({"image": images, "label": [0, 1, 2, 0, 1, 2]}, features=features)
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(tmp_path / "arr"))
    train = load_dataset(f"hf:{tmp_path / 'arr'}", "data", train=True)
    assert isinstance(train, ArrayDataset) and train.images.dtype == torch.uint8 and train.num_classes == 3
    assert torch.equal(train.images, torch.from_numpy(images)[:, None])


def test_a_group_column_makes_each_group_a_device(made):
    cfg = config_from_dict({"name": "t"}, [*SMALL, *image_args(made), "data.partition=natural",
                                           "data.columns={group: writer}", "devices.num=null"])
    exp = prepare(cfg)
    writers = image_arrays("train")[2]
    assert sorted(exp.writers) == [f"w{k}" for k in range(WRITERS)]
    assert {w: s.tolist() for w, s in zip(exp.writers, exp.shards)} == {
        f"w{k}": np.flatnonzero(writers == f"w{k}").tolist() for k in range(WRITERS)}


def numbered_images(folder, n: int, labels=None):
    """A save_to_disk DatasetDict whose train split is ``n`` 4x4 grey PNGs, row u's pixels 0 and 1 holding u
    (u // 256, u % 256) and its label ``u * 7 % 5`` (or ``labels``): the test's oracle of which row is which."""
    import datasets
    from PIL import Image
    uid = np.arange(n)
    pixels = np.zeros((n, 4, 4), dtype=np.uint8)
    pixels[:, 0, 0], pixels[:, 0, 1] = uid // 256, uid % 256
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=5)})
    split = datasets.Dataset.from_dict({"image": [Image.fromarray(a) for a in pixels],
                                        "label": list(uid * 7 % 5 if labels is None else labels)}, features=features)
    datasets.DatasetDict(train=split, test=split.select(range(10))).save_to_disk(str(folder / "numbered"))
    return folder / "numbered"


def test_an_image_split_past_two_read_chunks_reaches_the_devices_each_row_once(made, tmp_path):
    """data/hf.py formats an image split hf.CHUNK (4,096) rows at a time; MNIST's 60,000 rows take 15 chunks.
    Past two of them, every row is on one device, with its own pixels and label."""
    from seafl_dist.data import hf
    n = 2 * hf.CHUNK + 5
    path = numbered_images(tmp_path, n)
    exp = prepare(config_from_dict({"name": "t"}, [*SMALL, f"data.name=hf:{path}", f"model.name={made[3]}:tiny_mlp",
                                                   "data.partition=iid"]))
    rows = np.concatenate(exp.shards)
    images = exp.train.images[torch.from_numpy(rows)]
    uid = (images[:, 0, 0, 0].long() * 256 + images[:, 0, 0, 1].long()).numpy()
    assert sorted(uid.tolist()) == list(range(n))  # each row once: none lost or doubled at a chunk's edge
    assert exp.train.labels[torch.from_numpy(rows)].tolist() == (uid * 7 % 5).tolist()


def test_a_split_one_row_past_its_last_full_chunk_keeps_that_row(tmp_path, monkeypatch):
    """len % CHUNK == 1 (here CHUNK 8, 17 rows: two full chunks and one row): the last chunk is that one row."""
    from seafl_dist.data import hf
    monkeypatch.setattr(hf, "CHUNK", 8)
    clear_cache()
    train = load_dataset(f"hf:{numbered_images(tmp_path, 17)}", "data", train=True)
    uid = (train.images[:, 0, 0, 0].long() * 256 + train.images[:, 0, 0, 1].long()).tolist()
    assert uid == list(range(17)) and train.labels.tolist() == [u * 7 % 5 for u in range(17)]
    clear_cache()


def test_a_negative_label_is_refused_in_one_line(tmp_path):
    """A ClassLabel's -1 (the library's "no label", as in an unlabelled test split) is no class to train on."""
    labels = [u * 7 % 5 for u in range(12)]
    labels[3] = -1
    path = numbered_images(tmp_path, 12, labels)
    clear_cache()
    with pytest.raises(ConfigError) as err:
        load_dataset(f"hf:{path}", "data", train=True)
    one_line_message(str(err.value), "config key 'data.columns' has value None",
                     f"a label column of integers >= 0 (its label column 'label' of hf:{path} is not)")


def test_two_sources_of_one_builder_and_root_but_other_files_are_two_datasets(tmp_path):
    """One process (a sweep, the API) opening hf:parquet twice under one data.root gets each one's own files."""
    import datasets
    for name, n in (("a", 6), ("b", 9)):
        datasets.Dataset.from_dict({"ids": [[k, k + 1] for k in range(n)], "topic": [k % 3 for k in range(n)]}
                                   ).to_parquet(str(tmp_path / f"{name}.parquet"))
    clear_cache()
    got = {name: load_dataset("hf:parquet", tmp_path, train=True, files={"train": f"{name}.parquet",
                                                                         "test": f"{name}.parquet"},
                              columns={"input": "ids", "label": "topic"}) for name in ("a", "b")}
    assert {name: len(d) for name, d in got.items()} == {"a": 6, "b": 9}
    assert got["b"].batch(torch.tensor([8]))[0].tolist() == [[8, 9]]
    clear_cache()


def test_a_flower_partitioner_by_a_column_of_a_parquet_token_source_gives_flowers_rows(made):
    """partition_by on a source that is not images (its rows held as samples): Flower reads the column of the
    Hugging Face split under them, and each device gets the rows flwr_datasets gives."""
    import datasets
    import flwr_datasets.partitioner as fp
    args = {"partition_by": "topic", "alpha": 0.5, "seed": 11, "min_partition_size": 5}
    cfg = config_from_dict({"name": "t"}, [*SMALL, *text_args(made), "data.partition=flwr:DirichletPartitioner",
                                           f"data.partition_args={json.dumps(args)}"])
    exp = prepare(cfg)
    theirs = fp.DirichletPartitioner(**args, num_partitions=10)
    split = datasets.load_dataset("parquet", data_files={"train": str(made[0] / made[2]["train"])})["train"]
    theirs.dataset = split.add_column("row", list(range(len(split))))
    assert [s.tolist() for s in exp.shards] == [list(theirs.load_partition(k)["row"]) for k in range(10)]
    assert sorted(np.concatenate(exp.shards).tolist()) == list(range(400))
    topics = token_rows(400, 0)[:, -1] % 4  # the parquet's topic column, as text_files wrote it
    assert exp.partition_report()["label_histograms"].tolist() == [
        np.bincount(topics[s], minlength=4).tolist() for s in exp.shards]


@pytest.mark.parametrize("partitioner, args, num", [
    ("DirichletPartitioner", {"partition_by": "label", "alpha": 0.3, "seed": 7, "min_partition_size": 5}, 10),
    ("PathologicalPartitioner", {"partition_by": "label", "num_classes_per_partition": 2, "seed": 3}, 10),
    ("NaturalIdPartitioner", {"partition_by": "writer"}, WRITERS),
])
def test_a_flower_partitioner_gives_each_device_the_rows_flower_gives(made, partitioner, args, num):
    import datasets
    import flwr_datasets.partitioner as fp
    cfg = config_from_dict({"name": "t"}, [*SMALL, *image_args(made), f"devices.num={num}",
                                           f"devices.concurrency={min(4, num)}", f"data.partition=flwr:{partitioner}",
                                           f"data.partition_args={json.dumps(args)}"])
    exp = prepare(cfg)
    theirs = getattr(fp, partitioner)(**args, **({} if partitioner == "NaturalIdPartitioner" else
                                                 {"num_partitions": num}))
    theirs.dataset = datasets.load_from_disk(str(made[1]))["train"]
    want = [theirs.load_partition(k)["uid"] for k in range(num)]
    assert [s.tolist() for s in exp.shards] == [list(w) for w in want]
    assert sorted(np.concatenate(exp.shards).tolist()) == list(range(400))  # each row on one device
    record = exp.partition_report()
    assert record["method"] == f"flwr:{partitioner}" and record["partition_args"] == args


def test_a_text_dataset_of_parquet_files_trains_an_lstm_end_to_end(made, tmp_path, here):
    proc = here(*text_args(made), "data.partition=flwr:IidPartitioner", out=tmp_path / "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["best"] > 0.5  # 4 classes: chance is 0.25
    part = json.loads((tmp_path / "r" / "partition.json").read_text())
    assert part["method"] == "flwr:IidPartitioner" and part["dataset"] == "hf:parquet"
    assert part["n_samples"] == [40] * 10  # Flower's IID: 400 rows in 10 equal parts
    assert np.sum(part["label_histograms"], axis=0).tolist() == np.bincount(token_rows(400, 0)[:, -1] % 4).tolist()


def test_a_killed_image_run_under_churn_and_w_and_b_resumes_to_the_uninterrupted_bytes_and_reports(made, tmp_path,
                                                                                                     here):
    """The image set (save_to_disk) split by Flower's Dirichlet over its label column, with held-out rows
    evaluated on the devices, a device profile and dropouts, W&B offline: killed after aggregation 3 (checkpoint
    at 2) and run again it ends with the uninterrupted run's bytes, learns, and `seafl report` draws it."""
    pytest.importorskip("wandb.proto.wandb_internal_pb2")
    from seafl_dist.report.build import write_report
    from wandb_runs import offline_env
    profile = write_profile(tmp_path / "devices.csv")
    flower = {"partition_by": "label", "alpha": 0.5, "seed": 2, "min_partition_size": 5}
    args = [*image_args(made), *CHURN[len(SMALL):], f"devices.profile={profile}",
            "data.partition=flwr:DirichletPartitioner", f"data.partition_args={json.dumps(flower)}",
            "data.device_holdout=0.25", "run.eval_every=2", "run.device_eval_every=2", "run.checkpoint_every=2",
            "run.checkpoint_every_s=null", "logging.wandb.enabled=true", "logging.wandb.mode=offline"]
    base = dict(os.environ, PYTHONPATH=os.pathsep.join([str(made[0]), os.environ.get("PYTHONPATH", "")]))
    env = {**offline_env(tmp_path, base), "OMP_NUM_THREADS": "1"}
    ref = here(*args, out=tmp_path / "ref", wandb_in=tmp_path)  # uninterrupted, in this process
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = tmp_path / "run"
    killed = seafl(made, *args, out=out, env={**env, "SEAFL_FAULT": "after_aggregate:3"})
    assert killed.returncode != 0 and checkpoint_versions(out) == [2], killed.stderr[-3000:]
    resumed = seafl(made, *args, out=out, env=env)
    assert resumed.returncode == 0 and "resumed" in resumed.stderr, resumed.stderr[-3000:]
    assert_same_run(tmp_path / "ref", out)
    for file in ("device_metrics.csv", "partition.json"):
        assert (out / file).read_bytes() == (tmp_path / "ref" / file).read_bytes(), file
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "drop" for e in events)  # the churn was real
    part = json.loads((out / "partition.json").read_text())
    assert part["method"] == "flwr:DirichletPartitioner" and part["partition_args"] == flower
    assert part["device_holdout"] == 0.25
    report = write_report([out], tmp_path / "report")
    for file in ("device_eval_cdf.png", "device_eval.csv"):
        assert report["files"][file].is_file(), file


@pytest.mark.parametrize("extra, key, fragments", [
    (["data.splits={test: validation}"], "data.name", ["no split 'validation'", "its splits: train, test",
                                                        "data.splits"]),
    (["data.columns={input: pixels}"], "data.columns", ["its input column 'pixels' is not one",
                                                        "it has image, label, writer, uid"]),
    (["data.partition=flwr:NoSuchPartitioner"], "data.partition", ["has value 'flwr:NoSuchPartitioner'",
                                                                   "no such row partitioner", "DirichletPartitioner"]),
    (["data.partition=flwr:VerticalEvenPartitioner"], "data.partition", [  # it splits columns, not rows
        "has value 'flwr:VerticalEvenPartitioner'", "no such row partitioner", "IidPartitioner"]),
    (["data.partition=flwr:IidPartitioner", "data.partition_args={num_partitions: 3}"], "data.partition_args",
     ["num_partitions is devices.num"]),
    (["data.partition=flwr:DirichletPartitioner", "data.partition_args={partition_by: label, beta: 1}"],
     "data.partition_args", ["DirichletPartitioner takes no beta", "alpha"]),
    (["data.partition=flwr:NaturalIdPartitioner", "data.partition_args={partition_by: writer}"], "devices.num",
     [f"allowed: {WRITERS} for data.partition=flwr:NaturalIdPartitioner"]),
])
def test_what_does_not_fit_is_refused_in_one_line(made, extra, key, fragments):
    with pytest.raises(ConfigError) as err:
        prepare(config_from_dict({"name": "t"}, [*SMALL, *image_args(made), *extra]))
    message = one_line_message(str(err.value), f"config key '{key}'", *fragments)
    assert "Vertical" not in message.split("has value")[1].split(":", 2)[-1]  # never offered: they split columns


def test_hf_keys_belong_to_hf_sources_and_partition_args_to_flower():
    for extra, key in ((["data.files={train: a.csv}"], "data.files"),
                       (["data.partition_args={alpha: 1}"], "data.partition_args"),
                       (["data.partition=flwr:IidPartitioner", "data.partition_by=label"], "data.partition_by")):
        with pytest.raises(ConfigError) as err:
            config_from_dict({"name": "t"}, [*SMALL, *extra])
        one_line_message(str(err.value), f"config key '{key}'")
