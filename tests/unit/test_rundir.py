"""What a run dir holds (runtime/rundir.py): the one config comparer, the files' proof, clearing, --out checks."""
import dataclasses
import typing

import pytest

from seafl_dist import versions
from seafl_dist.report.sinks import RunFileError, read_config, read_summary, write_json
from seafl_dist.runtime import rundir
from seafl_dist.settings import Config, ConfigError, dump_config, load_config
from small_runs import QUICKSTART, SMALL
from tmpfs import fill, tmpfs


def tree(*overrides):
    return rundir.config_tree(load_config(QUICKSTART, [*SMALL, *overrides]))


# Every key of the config's schema, classified: may it change on resume (docs/failures.md, "What may
# change on resume")? A key added to the schema and to neither list fails the first test below.
FREE = {"name", "run.checkpoint_every", "run.checkpoint_every_s", "runtime.device", "runtime.backend",
        "runtime.timeout_s", "runtime.threads", "runtime.placement", "logging.wandb.enabled", "logging.wandb.mode",
        "logging.wandb.project", "logging.wandb.entity", "logging.wandb.group", "logging.wandb.tags",
        "logging.wandb.job_type", "logging.progress", "logging.progress_every_s", "runtime.cuda_graphs",
        "devices.profile",  # the path only: the profile's bytes are compared by their sha256 (profile_mismatch)
        "privacy.key_file",  # the path only: the key is compared by the fingerprint the checkpoint holds
        "train.dp_sgd.key_file"}  # the path only: a given key must match the one private/device.key keeps
REFUSED = {f"{section}.{key}" for section, keys in {
    "algorithm": ["name", "buffer_size", "staleness_limit", "alpha", "mu", "theta", "similarity", "similarity_over",
                  "server_lr", "staleness_scaling", "mixing", "staleness_fn", "poly_a", "hinge_a", "hinge_b", "partial",
                  "update_norm_factor", "params", "server_opt.name", "server_opt.lr", "server_opt.beta1", "server_opt.beta2",
                  "server_opt.tau", "server_opt.pseudo_gradient", "server_opt.delay_adaptive",
                  "server_opt.delay_threshold", "server_opt.delay_c", "asyncsgd.lr", "asyncsgd.tau_c", "asyncsgd.c",
                  "ca2fl.max_cache_gb", "port.b", "port.lag", "fedstaleweight.offset", "fedcompass.alpha",
                  "fedcompass.latest_time_factor", "fedcompass.q_max", "fedcompass.q_min", "fedcompass.speed_momentum",
                  "defense.name", "defense.f", "defense.keep", "defense.beta", "defense.tau", "defense.iterations",
                  "defense.server_samples", "defense.gamma", "defense.rho", "defense.epsilon", "defense.refresh",
                  "defense.group_min", "defense.history"],
    "devices": ["num", "concurrency", "dropout", "availability_scale"],
    "train": ["epochs", "batch_size", "lr", "momentum", "weight_decay", "loop", "grad_clip_val", "grad_clip_algorithm",
              "prox_mu", "dp_sgd.enabled", "dp_sgd.clip", "dp_sgd.noise_multiplier", "dp_sgd.grad_sample_mode",
              "dp_sgd.fix_modules", "dp_sgd.accountant", "dp_sgd.target_epsilon"],
    "clock": ["sec_per_sample", "download_s", "upload_s", "compute_scale", "idle.distribution", "idle.s", "idle.a",
              "idle.max", "idle.resample"],
    "data": ["name", "root", "download", "partition", "partition_by", "shards_overlap", "concentration", "samples_per_device",
             "test_fraction", "emnist_split", "augment", "seed", "device_holdout", "device_test", "files", "columns",
             "splits", "partition_args", "validation"],
    "model": ["name", "width", "params"],  # a builder's own keyword arguments change the model
    "run": ["seed", "max_aggregations", "max_time", "target_accuracy", "eval_every", "targets", "stop_on_divergence",
            "target_metric", "target_mode", "device_eval_every", "device_eval_sample"],
    "runtime": ["precision", "batch_jobs", "deterministic"],
    "compression": ["codec", "levels", "bucket", "fraction", "error_feedback"],
    "privacy": ["enabled", "clipping_bound", "noise_multiplier", "epsilon", "delta", "accountant", "seafl_form",
                "max_participation", "diagnostics", "secure_noise", "seeded_noise", "adaptive_clip.enabled",
                "adaptive_clip.target_quantile", "adaptive_clip.lr", "adaptive_clip.count_std"],
    "threats": ["malicious", "malicious_devices", "attack", "fast", "scale", "sigma", "z", "epsilon", "perturbation",
                "backdoor_target", "backdoor_fraction", "trigger_size"]}.items() for key in keys}


def schema_keys(cls=Config, prefix=""):
    """Every leaf key of the config's dataclasses, dotted."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from schema_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


def test_every_key_of_the_schema_is_classified():
    keys = set(schema_keys())
    assert not FREE & REFUSED
    assert keys == FREE | REFUSED, (f"not classified: {sorted(keys - FREE - REFUSED)}; "
                                    f"no longer in the schema: {sorted((FREE | REFUSED) - keys)}")


def changed(key):
    """The small run's config tree with ``key`` set to a value it does not have (the population keys are
    left out of a config.yaml while unset: there they are added)."""
    t = tree()
    *path, leaf = key.split(".")
    node = t
    for part in path:
        node = node.setdefault(part, {})
    node[leaf] = ["changed"] if node.get(leaf) != ["changed"] else "changed"
    return t


@pytest.mark.parametrize("key", sorted(FREE))
def test_where_and_how_a_run_runs_may_differ(key):
    assert rundir.config_diff(tree(), changed(key)) == []


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_what_changes_the_results_may_not(key):
    assert rundir.config_diff(tree(), changed(key)) == [key]
    assert f"{key} (" in rundir.describe_diff([key], tree(), changed(key))


def fake_run(d, *, completed=True):
    """A run dir's files with a summary that proves them (as runtime/server.py writes it)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.yaml").write_text(dump_config(load_config(QUICKSTART, SMALL)))
    for name, text in (("events.jsonl", '{"event": "start"}\n'), ("metrics.csv", "version\n0\n"),
                       ("partition.json", "{}\n"), ("model.pt", "weights")):
        (d / name).write_text(text)
    write_json(d / "summary.json", {"status": "completed" if completed else "failed", "files": rundir.file_proof(d),
                                    **versions.stamp()})
    return d


def test_the_proof_holds_until_a_file_changes(tmp_path):
    d = fake_run(tmp_path / "run")
    summary = read_summary(d)
    assert set(summary["files"]) == set(rundir.PROVEN) - {"partition.npz", "train_log.csv", "device_metrics.csv",
                                                          "device_summary.csv"}  # columns only above 10,000
    # devices; train_log.csv only for a module that logs; device_*.csv only with run.device_eval_every
    assert rundir.proof_mismatch(d, summary) is None
    assert summary["files"]["model.pt"]["bytes"] == len("weights")
    (d / "events.jsonl").write_text('{"event": "stop"}\n')  # same size, other bytes
    assert "events.jsonl is not the file the run wrote" in rundir.proof_mismatch(d, summary)
    (d / "events.jsonl").write_text('{"event": "start"}\n')
    assert rundir.proof_mismatch(d, summary) is None
    (d / "model.pt").unlink()
    assert rundir.proof_mismatch(d, summary) == "model.pt is missing"
    assert "records no sizes" in rundir.proof_mismatch(d, {"status": "completed"})


def test_clear_removes_the_runs_files_only(tmp_path):
    d = fake_run(tmp_path / "run")
    for name in ("checkpoint-00000002.pt", "residuals-00000002-rank1.pt", "model.pt.tmp", "log.txt", "notes.md"):
        (d / name).write_text("x")  # the checkpoint and residuals: a run dir written before the move to private/
    rundir.private_dir(d).mkdir()
    for name in ("checkpoint-00000004.pt", "checkpoint-00000006.pt.tmp", "noise.key", "released-00000005.pt"):
        (rundir.private_dir(d) / name).write_text("x")  # private/ goes whole, the key and unknown names too
    (d / "wandb").mkdir()
    (d / "wandb" / "run.wandb").write_text("x")
    rundir.clear(d)
    # the sweep's log, the user's own file, W&B's folder of runs (one subfolder each)
    assert sorted(p.name for p in d.iterdir()) == ["log.txt", "notes.md", "wandb"]
    rundir.clear(d, extra=("log.txt",))
    assert sorted(p.name for p in d.iterdir()) == ["notes.md", "wandb"]


def test_remove_temps_leaves_the_checkpoints(tmp_path):
    private = rundir.private_dir(tmp_path)
    private.mkdir()
    for name in ("checkpoint-00000004.pt.tmp", "summary.json.tmp", "partition.json.tmp"):
        (tmp_path / name).write_text("x")
    for name in ("checkpoint-00000002.pt", "checkpoint-00000004.pt.tmp", "residuals-00000004-rank1.pt.tmp"):
        (private / name).write_text("x")
    rundir.remove_temps(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["private"]
    assert rundir.checkpoints(tmp_path) == [private / "checkpoint-00000002.pt"]


def test_checkpoints_are_found_in_private_and_at_the_top_of_a_run_dir_written_before_the_move(tmp_path):
    private = rundir.private_dir(tmp_path)
    assert rundir.checkpoints(tmp_path) == [] and rundir.private_files(tmp_path) == []
    for name in ("checkpoint-00000003.pt", "checkpoint-00000006.pt", "residuals-00000006-rank1.pt", "model.pt"):
        (tmp_path / name).write_text("x")
    assert rundir.checkpoints(tmp_path) == [tmp_path / "checkpoint-00000003.pt", tmp_path / "checkpoint-00000006.pt"]
    assert rundir.run_of(tmp_path / "checkpoint-00000006.pt") == tmp_path
    private.mkdir()
    for name in ("checkpoint-00000006.pt", "checkpoint-00000009.pt"):  # a resume of it writes into private/
        (private / name).write_text("x")
    assert rundir.checkpoints(tmp_path) == [tmp_path / "checkpoint-00000003.pt", tmp_path / "checkpoint-00000006.pt",
                                            private / "checkpoint-00000006.pt", private / "checkpoint-00000009.pt"]
    assert rundir.run_of(private / "checkpoint-00000009.pt") == tmp_path
    assert rundir.residual_files(tmp_path) == [(6, 1, tmp_path / "residuals-00000006-rank1.pt")]
    assert sorted(p.name for p in rundir.private_files(tmp_path)) == [
        "checkpoint-00000003.pt", "checkpoint-00000006.pt", "checkpoint-00000006.pt", "checkpoint-00000009.pt",
        "residuals-00000006-rank1.pt"]
    old = tmp_path / "runs" / "private"  # a run dir written before the move that happens to be named "private"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text("x")
    assert rundir.run_of(old / "checkpoint-00000006.pt") == old


def test_removing_checkpoints_keeps_a_private_dir_that_holds_more_and_a_finished_run_removes_it_whole(tmp_path):
    private = rundir.private_dir(tmp_path)
    private.mkdir()
    for name in ("checkpoint-00000002.pt", "residuals-00000002-rank1.pt", "noise.key"):
        (private / name).write_text("x")
    (tmp_path / "notes.md").write_text("x")
    rundir.remove_checkpoints(tmp_path)
    assert [p.name for p in private.iterdir()] == ["noise.key"]
    rundir.remove_private(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]


def test_the_line_of_a_run_dir_holding_server_private_files_names_the_folder_and_the_release(tmp_path):
    assert rundir.private_note(tmp_path) is None
    (tmp_path / "checkpoint-00000002.pt").write_text("x")  # before the move: the files are at the top
    assert f"holds server-private files in {tmp_path} (" in rundir.private_note(tmp_path)
    rundir.private_dir(tmp_path).mkdir()
    (rundir.private_dir(tmp_path) / "noise.key").write_text("x")
    note = rundir.private_note(tmp_path)
    assert note == (f"seafl: {tmp_path} holds server-private files in {tmp_path / 'private'} (checkpoints, devices' "
                    f"residuals, the noise key: never publish them); to publish this run, copy only what is released: "
                    f"seafl release {tmp_path} OUT")


def test_readers_give_none_for_what_is_missing_or_unreadable(tmp_path):
    assert read_summary(tmp_path) is None and read_config(tmp_path) is None
    (tmp_path / "summary.json").write_text("{cut")
    (tmp_path / "config.yaml").write_text("algorithm: [cut\n")
    assert read_summary(tmp_path) is None and read_config(tmp_path) is None


def test_an_out_that_is_a_file_or_under_one_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is an existing file, not a directory"):
        rundir.check_writable(tmp_path / "f")
    with pytest.raises(ConfigError, match="is a file, so the run dir cannot be created under it"):
        rundir.check_writable(tmp_path / "f" / "run")
    rundir.check_writable(tmp_path / "new" / "run")  # creatable: fine, and nothing is made
    assert not (tmp_path / "new").exists()


def test_an_out_on_a_read_only_file_system_is_refused(tmp_path):
    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro, pytest.raises(ConfigError, match="read-only file system"):
        rundir.check_writable(ro / "run")


def test_write_json_names_the_file_when_the_disk_is_full(tmp_path):
    with tmpfs(tmp_path / "full", "size=256k") as full:
        fill(full, leave=4096)
        with pytest.raises(RunFileError, match=f"cannot write {full / 'summary.json'}: No space left on device"):
            write_json(full / "summary.json", {"rows": ["x" * 100] * 200})
        assert sorted(p.name for p in full.iterdir()) == ["filler"], "the temp file of the failed write is gone"


def test_plan_reports_completed_only_for_this_configs_intact_run(tmp_path):
    from seafl_dist.runtime.checkpoint import CheckpointError, Plan, plan
    from seafl_dist.runtime.runlock import RunDirBusy, RunDirLock
    d = fake_run(tmp_path / "run")
    cfg = load_config(QUICKSTART, SMALL)
    assert plan(cfg, d, explicit=False) == Plan("completed")
    assert plan(load_config(QUICKSTART, [*SMALL, "runtime.threads=3"]), d, explicit=True) == Plan("completed")
    other = load_config(QUICKSTART, [*SMALL, "train.lr=0.2"])
    with pytest.raises(CheckpointError, match=rf"holds a completed run of another config: train.lr \({cfg.train.lr} there"):
        plan(other, d, explicit=False)
    assert plan(other, d, explicit=False, overwrite=True) == Plan("fresh")
    write_json(d / "summary.json", {"status": "completed", **versions.stamp()})  # no proof (numerics this code's:
    # a dir an older seafl wrote, with no numerics either, is refused for that first, test_numerics_version.py)
    with pytest.raises(CheckpointError, match="records no sizes and checksums"):
        plan(cfg, d, explicit=False)
    assert plan(cfg, d, explicit=False, overwrite=True) == Plan("fresh")
    write_json(d / "summary.json", {"status": "failed"})  # this config, no checkpoint: started over
    assert plan(cfg, d, explicit=False) == Plan("fresh")
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        plan(cfg, d, explicit=True)
    with pytest.raises(CheckpointError, match="holds a failed run of another config"):
        plan(other, d, explicit=False)
    with RunDirLock(d), pytest.raises(RunDirBusy, match="is in use by another run"):
        plan(cfg, d, explicit=False)
