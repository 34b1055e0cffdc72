"""W&B offline: a run with logging.wandb.mode=offline leaves an offline run whose history holds the
metrics, one step per version; a killed and resumed run continues the same W&B run id and logs
each version once. Read back from the run's ``.wandb`` files (W&B's record log: a LevelDB-style
log of ``wandb_internal_pb2.Record`` protobufs, read by seafl_dist.report.wandb_files), with no
API key and no network."""
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("wandb.proto.wandb_internal_pb2")

import in_process  # noqa: E402
from seafl_dist.report.wandb_files import offline_files, read_offline_run  # noqa: E402
from wandb_runs import history_across, logged_versions, offline_env  # noqa: E402

TINY = """\
algorithm: {name: seafl2, buffer_size: 2, staleness_limit: 1}
devices: {num: 8, concurrency: 4}
train: {epochs: 2, batch_size: 16, lr: 0.05, momentum: 0.9}
clock: {sec_per_sample: 0.01, idle: {distribution: zipf, s: 1.7, max: 20}}
data: {name: digits, partition: dirichlet, concentration: 0.5}
model: {name: lenet5}
runtime: {threads: 1}
run: {seed: 0, max_aggregations: 5, targets: [0.3, 0.999]}
logging: {progress: none}
"""


def seafl_offline(tmp: Path, out: Path, *overrides, fault=None):
    (tmp / "tiny.yaml").write_text(TINY)
    return subprocess.run([sys.executable, "-m", "seafl_dist", "run", str(tmp / "tiny.yaml"),
                           "logging.wandb.enabled=true", "logging.wandb.mode=offline", *overrides, "--out", str(out)],
                          capture_output=True, text=True, env=offline_env(tmp, fault=fault), timeout=600)


def seafl_here(tmp: Path, out: Path, *overrides):
    """``seafl_offline`` in this process (no interpreter start), W&B's settings in the environment as
    ``offline_env`` makes them: a finished process (exit code, stdout, stderr)."""
    (tmp / "tiny.yaml").write_text(TINY)
    with pytest.MonkeyPatch.context() as mp:  # module-scoped fixtures use it too
        for key in [k for k in os.environ if k.startswith("WANDB_") or k == "SEAFL_FAULT"]:
            mp.delenv(key)
        for key, value in offline_env(tmp).items():
            if key.startswith("WANDB_") or key == "NETRC":
                mp.setenv(key, value)
        return in_process.seafl("run", tmp / "tiny.yaml", "logging.wandb.enabled=true", "logging.wandb.mode=offline",
                                *overrides, "--out", out)


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wb")
    out = tmp / "run"
    proc = seafl_here(tmp, out, "logging.wandb.group=g1", "logging.wandb.tags=[tiny,test]",
                         "logging.wandb.job_type=" + "K" * 70)  # a sweep sets its grid point's label
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, list(out.rglob("*"))
    return out, read_offline_run(files[0])


def test_history_holds_every_eval_and_aggregation(offline_run):
    out, wb = offline_run
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    evals = [h for h in wb["history"] if "eval/accuracy" in h]
    assert [h["version"] for h in evals] == [int(r["version"]) for r in rows]
    assert [h["eval/accuracy"] for h in evals] == pytest.approx([float(r["accuracy"]) for r in rows])
    assert [h["eval/loss"] for h in evals] == pytest.approx([float(r["loss"]) for r in rows])
    assert [h["virtual_time"] for h in evals] == pytest.approx([float(r["time"]) for r in rows])
    aggs = [h for h in wb["history"] if "agg/updates" in h]
    assert [h["version"] for h in aggs] == [1, 2, 3, 4, 5]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [h["agg/updates"] for h in aggs] == [len(e["updates"]) for e in events if e["event"] == "aggregate"]
    images = {k.rsplit("/", 1)[0] for h in wb["history"] for k in h if k.startswith("plots/")}
    assert images == {"plots/accuracy_vs_time", "plots/time_to_target", "plots/timeline",
                      "plots/participation"}  # as wandb.Image


def test_config_summary_group_and_sync_note(offline_run):
    out, wb = offline_run
    assert wb["config"]["algorithm"]["name"] == "seafl2" and wb["config"]["run"]["max_aggregations"] == 5
    assert wb["run"].run_group == "g1" and list(wb["run"].tags) == ["tiny", "test"]
    assert wb["run"].job_type == "K" * 64  # W&B's longest
    summary = json.loads((out / "summary.json").read_text())
    assert wb["summary"]["final_accuracy"] == pytest.approx(summary["final_accuracy"])
    assert wb["summary"]["aggregations"] == 5 and wb["summary"]["status"] == "completed"
    assert wb["summary"]["time_to_target/0.999"] is None  # never reached
    note = (out / "wandb_sync.txt").read_text()
    sync_dir = Path(note.split("wandb sync ", 1)[1].strip())
    assert sync_dir.is_dir() and sync_dir.parent == (out / "wandb").resolve()
    assert list(sync_dir.glob("files/media/images/plots/*.png"))


def test_no_callbacks_and_no_wandb_import_unless_enabled():
    code = ("import sys\n"
            "from seafl_dist.settings import config_from_dict\n"
            "from seafl_dist.runtime.inprocess import run_inprocess\n"
            "from seafl_dist.report.wandb_sink import make_callbacks\n"
            "assert make_callbacks(config_from_dict({}), '.') == []\n"
            "cfg = config_from_dict({}, ['logging.wandb.enabled=true', 'logging.wandb.mode=disabled'])\n"
            "assert make_callbacks(cfg, '.') == []\n"
            "assert 'wandb' not in sys.modules, 'wandb imported by a plain run'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


# ---- W&B follows the run: one id, each version once ---------------------------------------------

def test_killed_and_resumed_run_continues_the_id_and_logs_each_version_once(tmp_path):
    out = tmp_path / "run"
    killed = seafl_offline(tmp_path, out, "run.checkpoint_every=2", fault="after_aggregate:3")
    assert killed.returncode != 0, killed.stderr
    run_id = json.loads((out / "wandb_run.json").read_text())["id"]  # stored before anything was logged
    assert [f.parent.name.endswith(run_id) for f in out.glob("wandb/offline-run-*/*.wandb")] == [True]

    resumed = seafl_offline(tmp_path, out, "run.checkpoint_every=2")  # the same command again
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stderr and "after aggregation 2" in resumed.stderr
    assert json.loads((out / "wandb_run.json").read_text())["id"] == run_id
    files = offline_files(out / "wandb", run_id)
    assert len(files) == 2 and len(list(out.glob("wandb/offline-run-*"))) == 2
    assert read_offline_run(files[1])["run"].run_id == run_id  # (the killed one may hold no record at all)

    history = history_across(files)
    assert logged_versions(files) == [0, 1, 2, 3, 4, 5]  # each once: none lost with the killed process, none twice
    assert all(h["_step"] == h["version"] for h in history if "version" in h)
    by_version = {h["version"]: h for h in history if "version" in h}
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [by_version[int(r["version"])]["eval/accuracy"] for r in rows] == pytest.approx(
        [float(r["accuracy"]) for r in rows])
    best = [by_version[v]["eval/best_accuracy"] for v in range(6)]
    assert best == pytest.approx([max(float(r["accuracy"]) for r in rows[:v + 1]) for v in range(6)])
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [by_version[v]["agg/updates"] for v in range(1, 6)] == \
        [len(e["updates"]) for e in events if e["event"] == "aggregate"]
    note = (out / "wandb_sync.txt").read_text()
    assert all(str(f.parent.resolve()) in note for f in files)


@pytest.fixture
def wandb_offline_env(tmp_path, monkeypatch):
    for key, value in offline_env(tmp_path).items():
        if key.startswith("WANDB_") or key == "NETRC":
            monkeypatch.setenv(key, value)


def agg_event(v):
    return {"event": "aggregate", "time": 10.0 * v, "version": v,
            "updates": [{"device": 0, "staleness": v % 2, "epochs": 2, "weight": 0.5}]}


def eval_row(v):
    return {"version": v, "time": 10.0 * v, "accuracy": [0.2, 0.5, 0.4, 0.6, 0.3, 0.7][v], "loss": 1.0 / (v + 1),
            "updates": 1, "mean_staleness": 0.0, "max_staleness": 0, "notifications": 0, "rejected": 0}


@pytest.mark.parametrize("dp", [False, True])
def test_versions_w_and_b_already_holds_are_skipped(dp, tmp_path, wandb_offline_env):
    """A process logs versions 0..4 and is interrupted with its checkpoint at 2; the resumed one
    re-runs 3 and 4 (skipped: the earlier offline file holds them) and logs 5. Under DP (issue 60 C) each process
    starts W&B only in close(), without system statistics: every row is stamped after the run's end."""
    from seafl_dist.report.sinks import RunWriter
    from seafl_dist.report.wandb_sink import WandbSink
    from seafl_dist.settings import config_from_dict

    private = ["privacy.enabled=true", "privacy.noise_multiplier=1"] if dp else []
    cfg = config_from_dict({}, ["logging.wandb.enabled=true", "logging.wandb.mode=offline", "train.epochs=2",
                                *private])
    out = tmp_path / "run"
    first = WandbSink(cfg, out)
    writer = RunWriter(out)
    for v in range(5):
        if v:
            writer.event(agg_event(v))
            first.on_aggregate(agg_event(v))
        writer.metrics(eval_row(v))
        first.on_eval(eval_row(v))
    assert (first.run is None and not (out / "wandb").exists()) is dp, "W&B started during a DP run"
    ended = time.time()
    first.close({"status": "interrupted"})
    writer.close()

    again = WandbSink(cfg, out, resumed=True)
    for v in (3, 4, 5):
        again.on_aggregate(agg_event(v))
        again.on_eval(eval_row(v))
    ended_again = time.time()
    again.close({"status": "completed"})
    assert again.run.id == first.run.id and again.logged_through == 4
    assert bool(first.run.settings.x_disable_stats) is dp
    files = offline_files(out / "wandb", first.run.id)
    assert logged_versions(files) == [0, 1, 2, 3, 4, 5]
    assert (min(h["_timestamp"] for h in read_offline_run(files[0])["history"]) >= ended) is dp
    if dp:
        assert min(h["_timestamp"] for h in read_offline_run(files[1])["history"]) >= ended_again
    history = history_across(files)
    last = next(h for h in history if h.get("version") == 5)
    assert last["eval/best_accuracy"] == 0.7 and last["agg/max_staleness"] == 1
    if dp:  # the ledger's ids are DP's as without it (one W&B start less)
        return

    fresh = WandbSink(cfg, out)  # a run that starts over in the dir is a new W&B run
    fresh.close({"status": "failed"})
    assert fresh.run.id != first.run.id
    assert json.loads((out / "wandb_run.json").read_text())["id"] == fresh.run.id


def test_offline_files_of_processes_started_within_one_second(tmp_path):
    """W&B names a process's folder by its start second; one started within the same second as an
    earlier process of the run gets ``-1``, ``-2``, ... appended (wandb 0.31). Those are found, in
    start order; another run's folders are not. (A resume within one second of the kill lost its
    earlier process's versions from ``last_step`` before: they were logged twice.)"""
    from seafl_dist.report.wandb_files import offline_files

    names = ["offline-run-20261127_122137-abc1xyz9-10", "offline-run-20261127_122137-abc1xyz9-2",
             "offline-run-20261127_122138-abc1xyz9", "offline-run-20261127_122137-abc1xyz9",
             "offline-run-20261127_122136-abc1xyz9", "offline-run-20261127_122137-abc1xyz9-1",
             "offline-run-20261127_122137-zzz1xyz9", "offline-run-20261127_122137-abc1xyz9x",
             "offline-run-20261127_122137-abc1xyz9-x"]
    for n in names:
        run_id = n.split("-")[3]
        (tmp_path / n).mkdir()
        (tmp_path / n / f"run-{run_id}.wandb").write_bytes(b"")
    assert [f.parent.name.removeprefix("offline-run-20261127_") for f in offline_files(tmp_path, "abc1xyz9")] == [
        "122136-abc1xyz9", "122137-abc1xyz9", "122137-abc1xyz9-1", "122137-abc1xyz9-2", "122137-abc1xyz9-10",
        "122138-abc1xyz9"]


def test_drop_counts_reach_w_and_b(tmp_path):
    """Device churn (devices.dropout): every eval row carries the drops so far, the summary the totals."""
    out = tmp_path / "run"
    proc = seafl_here(tmp_path, out, "devices.dropout=0.3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wb = read_offline_run(next(out.glob("wandb/offline-run-*/run-*.wandb")))
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    evals = [h for h in wb["history"] if "eval/accuracy" in h]
    assert [h["eval/drops"] for h in evals] == [int(r["drops"]) for r in rows]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["drops"]["total"] > 0
    assert wb["summary"]["drops/total"] == summary["drops"]["total"] == int(rows[-1]["drops"])
    assert wb["summary"]["drops/dropout"] == summary["drops"]["total"]


def test_where_a_run_diverged_is_in_the_w_and_b_summary(tmp_path):
    out = tmp_path / "run"
    proc = seafl_here(tmp_path, out, "algorithm.name=fedbuff", "algorithm.server_lr=30")  # blows up at once
    assert proc.returncode == 0, proc.stdout + proc.stderr
    at = json.loads((out / "summary.json").read_text())["diverged_at"]
    (f,) = out.glob("wandb/offline-run-*/run-*.wandb")
    wb = read_offline_run(f)["summary"]
    assert at is not None and (wb["diverged_at/version"], wb["diverged_at/time"]) == (at["version"], at["time"])


def test_a_modules_own_metrics_reach_w_and_b(tmp_path):
    """A module evaluated by its own test_step (docs/extending.md's autoencoder): each evaluation's logged
    values as eval/<name>, the best of run.target_metric so far as eval/best_<name> (min: a loss); what it
    logs while training as train/<name>, per aggregation."""
    from docs_checks import page_modules
    from docs_pages import ROOT, read_page
    (tmp_path / "page").mkdir()
    out = tmp_path / "run"
    with page_modules([read_page(ROOT / "docs" / "extending.md")], tmp_path / "page"):  # importable meanwhile
        proc = seafl_here(tmp_path, out, "model.name=digits_autoencoder:autoencoder", "run.target_metric=test_loss",
                          "run.target_mode=min", "run.targets=[0.9]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wb = read_offline_run(next(out.glob("wandb/offline-run-*/run-*.wandb")))
    with open(out / "metrics.csv") as f:
        losses = [float(r["test_loss"]) for r in csv.DictReader(f)]
    evals = [h for h in wb["history"] if "eval/test_loss" in h]
    assert [h["eval/test_loss"] for h in evals] == pytest.approx(losses)
    assert [h["eval/best_test_loss"] for h in evals] == pytest.approx([min(losses[:i + 1]) for i in range(len(losses))])
    assert not any("eval/accuracy" in h for h in wb["history"])
    assert wb["summary"]["best"] == pytest.approx(min(losses)) and wb["summary"]["target_metric"] == "test_loss"
    # what its training_step logs (train_loss), per aggregation as train_log.csv has it: train/train_loss
    with open(out / "train_log.csv") as f:
        logged = {int(r["version"]): float(r["value"]) for r in csv.DictReader(f) if r["name"] == "train_loss"}
    seen = {h["version"]: h["train/train_loss"] for h in wb["history"] if "train/train_loss" in h}
    assert seen == pytest.approx(logged) and len(logged) == 5


def test_device_evaluation_is_logged_with_its_version_and_the_final_one_at_the_end(tmp_path):
    """device_eval/<stat> of the target metric, device_eval/loss_<stat>, the distribution as a histogram, against
    virtual time (define_metric); the last evaluation (version 5, off the period of 2) comes after its central one."""
    from seafl_dist.report.device_eval import read_device_summary
    from seafl_dist.report.wandb_files import records
    out = tmp_path / "run"
    proc = seafl_here(tmp_path, out, "data.device_holdout=0.25", "run.device_eval_every=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(out.glob("wandb/offline-run-*/run-*.wandb"))
    history = read_offline_run(files[0])["history"]
    rows = [h for h in history if "device_eval/p10" in h]
    summary = {(r["version"], r["metric"]): r for r in read_device_summary(out)}
    assert [h["version"] for h in rows] == [0, 2, 4, 5]
    for h in rows:
        acc, loss = summary[h["version"], "accuracy"], summary[h["version"], "loss"]
        assert h["device_eval/p10"] == pytest.approx(acc["p10"]) and h["device_eval/devices"] == acc["devices"]
        assert h["device_eval/worst10_mean"] == pytest.approx(acc["worst10_mean"])
        assert h["device_eval/loss_p90"] == pytest.approx(loss["p90"])
        assert h["device_eval/distribution/_type"] == "histogram" and sum(h["device_eval/distribution/values"]) == 8
    merged = [h for h in history if "eval/accuracy" in h and h["version"] in (0, 2, 4)]
    assert all("device_eval/p10" in h for h in merged)  # one W&B row per version: the central and the devices'
    globs = {r.metric.glob_name: r.metric.step_metric for r in records(files[0]) if r.WhichOneof("record_type") ==
             "metric" and r.metric.glob_name}
    assert globs.get("device_eval/*") == "virtual_time"


def test_privacy_epsilon_reaches_w_and_b_at_each_aggregation_and_in_the_summary(tmp_path):
    """privacy.enabled: each aggregation's ε so far, the noise's std and the largest m as privacy/*, and the
    summary's privacy figures (docs/privacy.md)."""
    out = tmp_path / "run"
    proc = seafl_here(tmp_path, out, "algorithm.name=fedbuff", "algorithm.staleness_limit=null",
                         "privacy.enabled=true", "privacy.noise_multiplier=2", "privacy.max_participation=3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wb = read_offline_run(next(out.glob("wandb/offline-run-*/run-*.wandb")))
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    aggs = [e for e in events if e["event"] == "aggregate"]
    logged = [h for h in wb["history"] if "privacy/epsilon" in h]
    assert [(h["version"], h["privacy/epsilon"], h["privacy/noise_std"], h["privacy/max_inclusions"]) for h in logged] \
        == [(e["version"], e["privacy"]["epsilon"], e["privacy"]["noise_std"], e["privacy"]["max_inclusions"])
            for e in aggs]
    summary = json.loads((out / "summary.json").read_text())
    assert wb["summary"]["privacy/epsilon"] == summary["privacy"]["epsilon"] > 0
    assert wb["summary"]["privacy/noise_multiplier"] == 2.0
