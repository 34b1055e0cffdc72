"""A LightningDataModule as the data (issue 39 B.1, B.2, B.3): dict samples of variable length, padded by its
collate, trained by both loops to the same bits and evaluated by the module's own test_step; Dirichlet from the
labels its dataset declares or from a key of its samples; a natural partition by a group key of its samples, with
each group's own test samples as its held-out data; and every DataModule or key that does not fit, refused in one
line with exit 2 and no run dir."""
import collections
import importlib
import json
import os
import subprocess
import sys

import pytest

import in_process
from datamodules import ARGS, write
from device_runs import CHURN, write_profile
from resuming import assert_same_run, checkpoint_versions
from seafl_dist.report.device_eval import read_device_metrics
from one_line import one_error_line
from small_runs import QUICKSTART, SMALL


def env_with(folder):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def seafl(folder, *args, out, env=None):
    return subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(QUICKSTART), *SMALL, *args, "--out", str(out)],
                          env=env or env_with(folder), cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.fixture
def here(monkeypatch):
    """``seafl run`` of the tiny quickstart in this process (tests/in_process.py: no interpreter start, the suite's
    time goes to the runs), with ``folder`` importable, as a finished process."""
    def run(folder, *args, out, dry=False):
        monkeypatch.syspath_prepend(str(folder))
        return in_process.seafl("run", QUICKSTART, *SMALL, *args, "--out", out, *(["--dry-run"] if dry else []))
    return run


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dm")
    return folder, write(folder)


def test_both_loops_train_a_datamodules_dict_samples_to_the_same_bits(mod, tmp_path, here):
    folder, name = mod
    args = [*ARGS(name), "data.partition=dirichlet"]
    plain = here(folder, *args, out=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    lightning = here(folder, *args, "train.loop=lightning", out=tmp_path / "lightning")
    assert lightning.returncode == 0, lightning.stderr[-3000:]
    for file in ("model.pt", "metrics.csv", "events.jsonl"):
        assert (tmp_path / "plain" / file).read_bytes() == (tmp_path / "lightning" / file).read_bytes(), file
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["target_metric"] == "test_acc"
    assert summary["best"] > 0.7  # test_acc, the test_step's own metric; 4 classes: chance is 0.25
    part = json.loads((tmp_path / "plain" / "partition.json").read_text())
    hist = part["label_histograms"]  # Dirichlet from the labels Words declares, read through random_split's Subset
    assert part["dataset"] == f"{name}:WordsDM" and len(hist) == 10 and len(hist[0]) == 4
    assert [sum(h) for h in hist] == part["n_samples"] and sum(part["n_samples"]) == 400


def test_an_iid_split_needs_no_labels(mod, tmp_path, here):
    folder, name = mod
    proc = here(folder, *ARGS(name, "Unlabelled"), out=tmp_path / "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = json.loads((tmp_path / "r" / "partition.json").read_text())
    assert "label_histograms" not in part and part["n_samples"] == [40] * 10


def test_dirichlet_from_a_key_of_the_samples_is_dirichlet_from_the_declared_labels_byte_for_byte(mod, tmp_path, here):
    """SpeakersDM's samples are WordsDM's with no labels declared and the class also under "topic": with
    data.partition_by=topic the split, and so the whole run, is WordsDM's with its declared labels."""
    folder, name = mod
    declared = here(folder, *ARGS(name), "data.partition=dirichlet", out=tmp_path / "declared")
    assert declared.returncode == 0, declared.stderr[-3000:]
    keyed = here(folder, *ARGS(name, "SpeakersDM"), "data.partition=dirichlet", "data.partition_by=topic",
                  f"data.root={tmp_path}", out=tmp_path / "keyed")
    assert keyed.returncode == 0, keyed.stderr[-3000:]
    for file in ("model.pt", "metrics.csv", "events.jsonl"):
        assert (tmp_path / "declared" / file).read_bytes() == (tmp_path / "keyed" / file).read_bytes(), file
    part = {r: json.loads((tmp_path / r / "partition.json").read_text()) for r in ("declared", "keyed")}
    assert part["keyed"].pop("partition_by") == "topic" and "partition_by" not in part["declared"]
    assert part["keyed"].pop("dataset") == f"{name}:SpeakersDM" and part["declared"].pop("dataset") == f"{name}:WordsDM"
    assert part["keyed"] == part["declared"] and len(part["keyed"]["label_histograms"]) == 10


def test_a_natural_partition_by_a_group_key_makes_each_speaker_a_device_with_its_own_test_samples(mod, tmp_path,
                                                                                                  monkeypatch, here):
    folder, name = mod
    monkeypatch.syspath_prepend(str(folder))
    user = importlib.import_module(name)  # a speaker is drawn per row by a seed of its own: the split does not move it
    said = {split: collections.Counter(user.Spoken(range(n), seed).speakers) for split, n, seed in
            (("train", 400, 2), ("test", 120, 3))}
    args = [*ARGS(name, "SpeakersDM"), "data.partition=natural", "data.partition_by=speaker", "devices.num=null",
            "data.device_test=writers", "run.device_eval_every=3", "run.eval_every=3", f"data.root={tmp_path}"]
    dry = here(folder, *args, out=tmp_path / "r", dry=True)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "devices: 10 simulated (one per value of 'speaker'), 4 training at once" in dry.stdout
    proc = here(folder, *args, out=tmp_path / "r")
    assert proc.returncode == 0, proc.stderr[-3000:]
    part = json.loads((tmp_path / "r" / "partition.json").read_text())
    assert part["method"] == "natural" and part["partition_by"] == "speaker" and part["device_test"] == "writers"
    assert sorted(part["writers"]) == sorted(user.SPEAKERS)  # every speaker a device, in the seeded order
    assert part["writers"] != sorted(user.SPEAKERS)
    assert part["n_samples"] == [said["train"][w] for w in part["writers"]]  # all of a speaker's samples, untouched
    rows = [r for r in read_device_metrics(tmp_path / "r") if r["version"] == 6]
    assert [r["samples"] for r in rows] == [said["test"][w] for w in part["writers"]]  # its test samples, by name
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["device_eval"]["metrics"]["test_acc"]["devices"] == 10


def test_a_killed_run_of_speakers_with_churn_and_w_and_b_resumes_to_the_uninterrupted_bytes_and_reports(mod, tmp_path,
                                                                                                     monkeypatch, here):
    """Everything else keeps working with any data: a DataModule split by a group key, under a device profile and
    dropouts, logging to W&B offline, killed after aggregation 3 (checkpoint at 2) and run again, ends with the
    uninterrupted run's bytes, each version logged to W&B once, and `seafl report` draws it."""
    pytest.importorskip("wandb.proto.wandb_internal_pb2")
    from seafl_dist.report.build import write_report
    from seafl_dist.report.wandb_files import offline_files
    from wandb_runs import logged_versions, offline_env
    folder, name = mod
    profile = write_profile(tmp_path / "devices.csv")
    args = [*ARGS(name, "SpeakersDM"), *CHURN[len(SMALL):], f"devices.profile={profile}", "data.partition=natural",
            "data.partition_by=speaker", "devices.num=null", "data.device_test=writers", "run.eval_every=2",
            "run.device_eval_every=2", "run.checkpoint_every=2", "run.checkpoint_every_s=null", f"data.root={tmp_path}"]
    wandb = ["logging.wandb.enabled=true", "logging.wandb.mode=offline"]
    env = {**offline_env(tmp_path, env_with(folder)), "OMP_NUM_THREADS": "1"}
    for k, v in env.items():  # the uninterrupted run in this process, W&B's folders under tmp_path as the others'
        if k.startswith("WANDB_") or k == "NETRC":
            monkeypatch.setenv(k, v)
    ref = here(folder, *args, *wandb, out=tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = tmp_path / "run"
    killed = seafl(folder, *args, *wandb, out=out, env={**env, "SEAFL_FAULT": "after_aggregate:3"})
    assert killed.returncode != 0 and checkpoint_versions(out) == [2], killed.stderr[-3000:]
    resumed = seafl(folder, *args, *wandb, out=out, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr
    assert_same_run(tmp_path / "ref", out)
    for file in ("device_metrics.csv", "partition.json"):
        assert (out / file).read_bytes() == (tmp_path / "ref" / file).read_bytes(), file
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "drop" for e in events)  # the churn was real
    run_id = json.loads((out / "wandb_run.json").read_text())["id"]
    assert logged_versions(offline_files(out / "wandb", run_id)) == [0, 1, 2, 3, 4, 5, 6]  # each once
    report = write_report([out], tmp_path / "report")
    for file in ("device_eval_cdf.png", "device_eval.csv"):
        assert report["files"][file].is_file(), file


@pytest.mark.parametrize("extra, fragments", [
    (["data.name={m}:Streams"], ["data.name", "Streams", "IterableDataset", "map-style Dataset"]),
    (["data.name={m}:NoLoader"], ["data.name", "NoLoader", "train_dataloader() failed"]),
    (["data.name={m}:Unlabelled", "data.partition=dirichlet"], ["data.partition", "'dirichlet'", "allowed: iid",
                                                               "declare no integer labels"]),
    (["model.name=lenet5"], ["model.name", "'lenet5'", "an import path", "any structure", "lenet5 takes images"]),
    (["model.name={m}:no_test_step", "run.target_metric=accuracy"], ["model.name", "no_test_step", "test_step",
                                                                      "batches are dict"]),
    (["data.augment=true"], ["data.augment", "True", "allowed: false", "augment in its dataset or collate"]),
    (["data.name={m}:SpeakersDM", "data.partition=dirichlet"], ["data.partition", "'dirichlet'", "allowed: iid",
                                                                "name a key of its samples in data.partition_by"]),
    (["data.name={m}:SpeakersDM", "data.partition=natural", "devices.num=null"],
     ["data.partition", "'natural'", "SpeakersDM has no writers", "name their group key in data.partition_by"]),
    (["data.name={m}:SpeakersDM", "data.partition=natural", "data.partition_by=who", "devices.num=null"],
     ["data.partition_by", "'who'", "a key of every sample", "sample 0 has none", "'speaker', 'tokens', 'topic'"]),
    (["data.name={m}:SpeakersDM", "data.partition=dirichlet", "data.partition_by=speaker"],
     ["data.partition_by", "'speaker'", "non-negative integer class", "sample 0's is '"]),
    (["data.name={m}:SpeakersDM", "data.partition=natural", "data.partition_by=speaker", "devices.num=11"],
     ["devices.num", "11", "at most the 10 groups of data.partition_by=speaker", "or null"]),
    (["data.partition_by=label"], ["data.partition_by", "'label'", "null with data.partition=iid"]),
])
def test_what_does_not_fit_is_refused_in_one_line(mod, tmp_path, extra, fragments, here):
    folder, name = mod
    proc = here(folder, *ARGS(name), *[e.format(m=name) for e in extra], out=tmp_path / "r")
    assert proc.returncode == 2
    one_error_line(proc.stderr, *fragments)
    assert not (tmp_path / "r").exists()


def test_a_dry_run_sets_it_up_and_probes_the_model_but_prepares_and_writes_nothing(mod, tmp_path, here):
    folder, name = mod
    proc = here(folder, *ARGS(name, "Prepared"), f"data.root={tmp_path / 'data'}", out=tmp_path / "r", dry=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"data: {name}:Prepared (a LightningDataModule): 400 training and 120 test samples" in proc.stdout
    assert f"model: {name}:bag_of_words (width 1), 388 parameters" in proc.stdout
    assert "shard sizes (iid): 40, 40, 40" in proc.stdout
    assert not (tmp_path / "data").exists() and not (tmp_path / "r").exists()
