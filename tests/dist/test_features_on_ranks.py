"""Each feature under torchrun W = 3 gives the one process's run dir byte for byte. The rank-dependent part of each:

- **codecs** (issue 41 C): workers send the codec's bytes over the same non-blocking transport and rank 0 decodes
  them, for every codec, error feedback (on per-device placement) included;
- **DP** (issue 42 A.6): the noise comes from the run's named stream keyed by the aggregation and the counts m_k from
  the schedule, both on rank 0, so the cap's retirements and the aggregate events' ε are the same;
- **a server optimizer** (issue 40): it runs on rank 0 after the rule, on the models the workers trained (SEAFL with
  Adam on the delta form, which also fetches each job's base version);
- **device evaluation** (issue 38 B.2): rank 0 gathers the chosen devices' held-out rows before it drops the
  training set, and the workers train on the training parts only;
- **a device profile with dropouts** (issue 17): jobs start between aggregations and drop, none of it by rank;
- **a LightningModule** with a scheduler, hooks and self.log, with the plain loop and with ``train.loop: lightning``
  (a real Trainer on every worker rank); torchmetrics values computed on each rank's own state (a gather over the
  run's process group hung the run), reset every epoch and evaluation;
- **a user's model with a Dropout layer**: each job's random layers draw from the job's own stream, whichever rank
  trains it and in whatever order (runtime/executor.py job_seeds);
- **a user's model, dataset, partition and rule**: every rank imports them and loads the dataset;
- **docs/extending.md's autoencoder** evaluated by its own test_step with ``run.target_metric=test_loss``: rank 0
  evaluates, the workers, which hold no test set, train it, and the times to target are the same;
- **a LightningDataModule** (issue 39 B.1, B.3): ``prepare_data`` runs once on the node and every rank sets it up
  with ``setup``'s seeded ``random_split``, with Dirichlet from declared labels and with a natural partition by a
  group key (each group's own test samples held out, rank 0 evaluating them);
- **FEMNIST's writers as devices**, each worker holding only its writers' rows (``runtime.placement=device``);
- **a Hugging Face dataset split by Flower's Dirichlet partitioner** (issue 54 D): every rank opens the saved
  dataset and asks Flower for the same partitions;
- **record-level DP-SGD** (``train.dp_sgd``, issue 67): each job's Poisson batches and Opacus's noise come from the
  devices' key (shared here) and the job, so whichever worker trains it draws the same; ResNet-18's BatchNorm becomes GroupNorm on
  every rank (``train.dp_sgd.fix_modules``), and rank 0's summary names the layers; σ is calibrated to
  ``train.dp_sgd.target_epsilon`` on every rank from the schedule alone, so the workers train at rank 0's σ;
- **``runtime.batch_jobs``** (fused jobs): within fp32 rounding of G = 1, as in one process
  (tests/dist/test_batch_jobs.py).

Every case runs in ONE torchrun job of 3 ranks (launching.run_batch): the launch and the ranks' interpreter starts
are paid once for all of them, and each case is compared with its own run in this process.
"""
import csv
import importlib.util
import json

import pytest

import datamodules
import user_extensions
from device_runs import churn_overrides, write_profile
from docs_checks import page_modules
from docs_pages import ROOT, read_page
from launching import run_batch, same_summary
from leaf_files import write_leaf
from resuming import reference
from small_runs import DP_KEY, DP_SGD_KEY, SMALL
from test_batch_jobs import ARGS as BATCHED, assert_trained_alike
from test_equivalence import assert_same_metrics

pytestmark = pytest.mark.dist

CODECS = {"fp16": [], "bf16": [], "int8": [], "qsgd": ["compression.levels=2", "compression.bucket=128"],
          "topk": ["compression.fraction=0.05"],
          "topk+feedback": ["compression.fraction=0.05", "compression.error_feedback=true", "runtime.placement=device"]}
HF = all(importlib.util.find_spec(m) for m in ("datasets", "flwr_datasets"))  # the .[hf] extra
LIGHTNING = {f"{module}-{loop}": (module, loop) for module in ("every_hook", "metrics_everywhere")
             for loop in ("plain", "lightning")}


def codec(name):
    return [*SMALL, f"compression.codec={name.split('+')[0]}", "clock.upload_s=5", *CODECS[name]]


def lightning(name):
    module, loop = LIGHTNING[name]
    return [*SMALL, f"model.name=lightning_modules:{module}", "train.epochs=2", f"train.loop={loop}",
            *(["run.target_metric=test_acc"] if module == "metrics_everywhere" else [])]


def datamodule(mods, dm, which):
    extra = {"declared labels": ["data.partition=dirichlet"],
             "groups by a key": ["data.partition=natural", "data.partition_by=speaker", "devices.num=null",
                                 "data.device_test=writers", "run.eval_every=3", "run.device_eval_every=3"]}[which]
    return [*SMALL, *datamodules.ARGS(dm, {"declared labels": "Prepared", "groups by a key": "SpeakersDM"}[which]),
            *extra]


class Setup:
    """The users' modules (one folder), the data files and each case's overrides but the data root of a DataModule
    case (its in-process run prepares its own, so each can be counted)."""

    def __init__(self, tmp):
        self.tmp, self.mods = tmp, tmp / "mods"
        self.mods.mkdir()
        self.ext = user_extensions.write(self.mods)
        layers = user_extensions.write(self.mods, user_extensions.LAYERS, prefix="layers")
        self.dm = datamodules.write(self.mods)
        with page_modules([read_page(ROOT / "docs" / "extending.md")], self.mods):
            pass  # docs/extending.md's modules (digits_autoencoder.py) written into the folder
        write_leaf(tmp / "leaf")
        self.cases = {
            **{f"codec-{n}": codec(n) for n in CODECS},
            "dp": [*SMALL, "privacy.enabled=true", "privacy.noise_multiplier=0.8", "privacy.max_participation=2", *DP_KEY,
                   "privacy.seafl_form=model"],  # SEAFL's paper form: S reads the distances between rank 0's bases
            # adaptive clipping (issue 67 item 4): C_t, its noised count and C_{t+1} live on rank 0 alone
            "dp-adaptive": [*SMALL, "algorithm.name=fedbuff", "privacy.enabled=true", "privacy.noise_multiplier=0.3",
                            "privacy.adaptive_clip.enabled=true", "privacy.adaptive_clip.count_std=0.5",
                            "privacy.adaptive_clip.lr=1", "privacy.clipping_bound=5", *DP_KEY],
            "adam": [*SMALL, "algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01",
                     "algorithm.server_opt.pseudo_gradient=delta"],
            "device-eval": [*SMALL, "data.device_holdout=0.25", "run.device_eval_every=2", "run.device_eval_sample=7"],
            "churn": churn_overrides(write_profile(tmp / "devices.csv"), "algorithm.name=seafl2", "train.epochs=2",
                                     "algorithm.staleness_limit=1"),
            **{f"lightning-{n}": lightning(n) for n in LIGHTNING},
            "dropout": [*SMALL, f"model.name={layers}:dropout_mlp", "train.epochs=2"],
            "extensions": [*SMALL, *user_extensions.EXTENDED(self.ext)],
            "own-test-step": [*SMALL, "model.name=digits_autoencoder:autoencoder", "run.target_metric=test_loss",
                              "run.target_mode=min", "run.targets=[0.9,0.8]"],
            **{f"datamodule-{w}": datamodule(self.mods, self.dm, w) for w in ("declared labels", "groups by a key")},
            "femnist": [f"data.root={tmp / 'leaf'}", "data.name=femnist", "data.partition=natural", "devices.num=null",
                        "devices.concurrency=3", "algorithm.buffer_size=2", "train.epochs=1", "train.batch_size=4",
                        "run.max_aggregations=3", "logging.progress=none", "runtime.threads=1",
                        "runtime.placement=device"],
            "batch-jobs": [*BATCHED, "runtime.batch_jobs=3"],
            # record-level DP-SGD (issue 67 item 1): Poisson batches and noise from each job's own streams
            # ResNet-18's BatchNorm replaced by GroupNorm on every rank (train.dp_sgd.fix_modules), said in the summary
            "dp-sgd": [*SMALL, "train.dp_sgd.enabled=true", "train.dp_sgd.noise_multiplier=null",  # σ calibrated to
                       "train.dp_sgd.target_epsilon=8", "model.name=resnet18",  # ε 8 on every rank alike
                       "model.width=0.125", "train.dp_sgd.fix_modules=true", "run.max_aggregations=1",
                       *DP_SGD_KEY],  # W = 3 against one process: the devices' key shared
        }
        if HF:
            from hf_datasets import image_dataset
            flower = {"partition_by": "label", "alpha": 0.3, "seed": 5, "min_partition_size": 5}
            self.cases["hf-flower"] = [*SMALL, f"data.name=hf:{image_dataset(tmp)}", f"model.name={self.ext}:tiny_mlp",
                                       "data.partition=flwr:DirichletPartitioner",
                                       f"data.partition_args={json.dumps(flower)}"]

    def root(self, name, ranks: bool):
        """A DataModule case's data root: one a case and a side, so each side's prepare_data calls can be counted."""
        return self.tmp / f"{'d3' if ranks else 'd1'}-{name.replace(' ', '_')}"

    def args(self, name, ranks: bool) -> list[str]:
        root = [f"data.root={self.root(name, ranks)}"] if name.startswith("datamodule-") else []
        return [*self.cases[name], *root]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return Setup(tmp_path_factory.mktemp("setup"))


@pytest.fixture(scope="module")
def on_ranks(setup, tmp_path_factory):
    """Every case's run on 3 ranks, all in one torchrun job."""
    where = tmp_path_factory.mktemp("w3")
    proc, outs = run_batch(3, {n: setup.args(n, ranks=True) for n in setup.cases}, where, timeout=1800,
                           paths=[setup.mods])
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert proc.stderr.count("on 3 ranks (gloo)") >= len(setup.cases), proc.stderr[-5000:]
    return outs


def in_process(setup, name, tmp_path, monkeypatch):
    from seafl_dist.data import clear_cache
    monkeypatch.syspath_prepend(str(setup.mods))
    try:
        return reference(tmp_path / "w1", setup.args(name, ranks=False))
    finally:
        clear_cache()


def same_files(ref, got, *files):
    for name in files:
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name


@pytest.mark.parametrize("name", list(CODECS))
def test_every_codec(name, setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, f"codec-{name}", tmp_path, monkeypatch), on_ranks[f"codec-{name}"]
    same_files(ref, got, "config.yaml", "events.jsonl", "metrics.csv", "model.pt")
    assert same_summary(ref, got)["status"] == "completed"
    assert '"bytes": ' in (got / "events.jsonl").read_text()


def test_dp_with_a_participation_cap(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "dp", tmp_path, monkeypatch), on_ranks["dp"]
    same_files(ref, got, "config.yaml", "events.jsonl", "metrics.csv", "model.pt", "partition.json")
    assert same_summary(ref, got)["privacy"]["max_inclusions"] == 2
    aggs = [e for e in map(json.loads, (got / "events.jsonl").read_text().splitlines()) if e["event"] == "aggregate"]
    assert all(e["privacy"]["noise_std"] > 0 for e in aggs)


def test_dp_with_adaptive_clipping(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "dp-adaptive", tmp_path, monkeypatch), on_ranks["dp-adaptive"]
    same_files(ref, got, "config.yaml", "events.jsonl", "metrics.csv", "model.pt", "partition.json")
    bounds = [e["privacy"]["clipping_bound"] for e in map(json.loads, (got / "events.jsonl").read_text().splitlines())
              if e["event"] == "aggregate"]
    assert bounds[0] == 5.0 and len(set(bounds)) == len(bounds)  # C_t moved at every aggregation, as on one rank
    assert same_summary(ref, got)["privacy"]["adaptive_clip"]["last_clipping_bound"] == bounds[-1]


def test_a_server_optimizer(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "adam", tmp_path, monkeypatch), on_ranks["adam"]
    same_files(ref, got, "config.yaml", "events.jsonl", "metrics.csv", "model.pt")
    assert same_summary(ref, got)["status"] == "completed"
    assert "server_opt:\n    name: adam" in (got / "config.yaml").read_text()


def test_device_evaluation(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "device-eval", tmp_path, monkeypatch), on_ranks["device-eval"]
    same_files(ref, got, "config.yaml", "events.jsonl", "metrics.csv", "model.pt", "partition.json",
               "device_metrics.csv", "device_summary.csv")
    assert same_summary(ref, got)["device_eval"]["devices"] == 7


def test_a_device_profile_with_dropouts(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "churn", tmp_path, monkeypatch), on_ranks["churn"]
    same_files(ref, got, "events.jsonl", "model.pt", "config.yaml", "partition.json")
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_got = same_summary(ref, got)
    assert s_got["drops"]["offline"] > 0 and s_got["drops"]["dropout"] > 0


@pytest.mark.parametrize("name", list(LIGHTNING))
def test_a_logging_lightning_module(name, setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, f"lightning-{name}", tmp_path, monkeypatch), on_ranks[f"lightning-{name}"]
    same_files(ref, got, "events.jsonl", "metrics.csv", "train_log.csv", "model.pt")
    first_logged = "train_loss" if LIGHTNING[name][0] == "every_hook" else "train_acc"
    assert f'"logged": {{"{first_logged}": ' in (ref / "events.jsonl").read_text()


def test_a_dropout_model(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "dropout", tmp_path, monkeypatch), on_ranks["dropout"]
    same_files(ref, got, "events.jsonl", "metrics.csv", "model.pt")


def test_a_users_model_data_partition_and_rule(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "extensions", tmp_path, monkeypatch), on_ranks["extensions"]
    same_files(ref, got, "events.jsonl")
    rows = [list(csv.DictReader(open(d / "metrics.csv"))) for d in (ref, got)]
    assert len(rows[0]) == len(rows[1]) == 7
    for r, g in zip(*rows):
        assert abs(float(r["accuracy"]) - float(g["accuracy"])) <= 1e-6 and r["version"] == g["version"]
    summary = json.loads((got / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["algorithm"] == f"{setup.ext}:uniform_mean"
    assert json.loads((got / "partition.json").read_text())["dataset"] == f"{setup.ext}:bands"


def test_a_module_evaluated_by_its_own_test_step(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "own-test-step", tmp_path, monkeypatch), on_ranks["own-test-step"]
    same_files(ref, got, "events.jsonl", "metrics.csv", "train_log.csv", "model.pt")
    s1, s3 = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    assert s1["time_to_target"] == s3["time_to_target"] and s3["target_metric"] == "test_loss"


@pytest.mark.parametrize("which", ["declared labels", "groups by a key"])
def test_a_datamodule(which, setup, on_ranks, tmp_path, monkeypatch):
    name = f"datamodule-{which}"
    ref, got = in_process(setup, name, tmp_path, monkeypatch), on_ranks[name]
    for ranks in (False, True):  # prepare_data ran once on the one node, as in one process
        assert len((setup.root(name, ranks) / "prepared.txt").read_text().split()) == 1, ranks
    same_files(ref, got, "events.jsonl", "metrics.csv", "model.pt", "partition.json",
               *(["device_metrics.csv"] if which == "groups by a key" else []))


def test_femnist_writers_as_devices(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "femnist", tmp_path, monkeypatch), on_ranks["femnist"]
    same_files(ref, got, "events.jsonl", "partition.json", "config.yaml", "metrics.csv", "model.pt")


@pytest.mark.skipif(not HF, reason="needs the .[hf] extra (datasets, flwr-datasets)")
def test_a_hugging_face_dataset_split_by_flower(setup, on_ranks, tmp_path, monkeypatch):
    ref, got = in_process(setup, "hf-flower", tmp_path, monkeypatch), on_ranks["hf-flower"]
    same_files(ref, got, "events.jsonl", "metrics.csv", "model.pt", "partition.json")
    assert json.loads((got / "partition.json").read_text())["method"] == "flwr:DirichletPartitioner"


def test_dp_sgd_on_the_workers(setup, on_ranks, tmp_path, monkeypatch, capsys):
    ref, got = in_process(setup, "dp-sgd", tmp_path, monkeypatch), on_ranks["dp-sgd"]
    same_files(ref, got, "config.yaml", "events.jsonl", "metrics.csv", "model.pt")
    dp = same_summary(ref, got)["dp_sgd"]  # each device's ε and the σ calibrated included
    replaced = dp["replaced"]
    assert dp["target_epsilon"] == 8 and 0 < dp["epsilon"]["max"] <= 8 and dp["noise_multiplier"] > 0
    assert replaced[0].startswith("stem.1: BatchNorm2d -> GroupNorm(") and len(replaced) == 20  # stem + 8 x 2 + 3
    line = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("seafl: train.dp_sgd.fix_modules")]
    assert len(line) == 1 and "replaced 20 layers" in line[0] and replaced[-1] in line[0]  # the run's first lines


def test_batched_jobs(setup, on_ranks, tmp_path, monkeypatch):
    """Within fp32 rounding of the same run with G = 1 in one process (test_batch_jobs.py's standard)."""
    g1 = reference(tmp_path / "g1", BATCHED)
    assert_trained_alike(g1, on_ranks["batch-jobs"])
