"""The residual files of a torchrun run with error feedback (runtime/residuals.py): which go with which checkpoint,
what rank 0 checks of them, and the disk refusal before anything is written. In one process (issue 61: only
tests/dist held them): what a worker's file holds and what it answers SAVE with, and checkpoint.load's refusal of
a checkpoint whose residuals are not all there. They live in the run dir's private/; a run dir written before the
move holds them at its top level."""
from pathlib import Path

import pytest
import torch

from seafl_dist.codecs.feedback import ErrorFeedback
from seafl_dist.runtime import checkpoint, residuals
from seafl_dist.runtime.rundir import private_dir, remove_checkpoints
from seafl_dist.settings import ConfigError, dump_config, load_config
from seafl_dist.transport import SAVED, Header
from seafl_dist.versions import stamp
from one_line import one_line_message
from small_runs import QUICKSTART

EF = ["compression.codec=topk", "compression.fraction=0.05", "compression.error_feedback=true",
      "runtime.placement=device"]


def touch(run_dir, *names, place=private_dir):
    """Files of 7 bytes in the run dir's private/ (``place=Path``: at its top level, as before the move)."""
    place(run_dir).mkdir(parents=True, exist_ok=True)
    for n in names:
        (place(run_dir) / n).write_bytes(b"x" * 7)


def test_pruning_keeps_the_files_of_kept_checkpoints_and_only_the_newest_ones_it_names(tmp_path):
    # 2 and 4 at the top level: a run dir written before the move to private/, resumed since
    touch(tmp_path, "residuals-00000002-rank1.pt", "residuals-00000004-rank1.pt", "model.pt", place=Path)
    touch(tmp_path, "residuals-00000004-rank2.pt", "residuals-00000006-rank1.pt", "residuals-00000006-rank2.pt",
          "residuals-00000006-rank3.pt", "residuals-00000008-rank1.pt")
    # kept checkpoints 4 and 6; the newest (6) names ranks 1 and 2 (rank 3: an earlier attempt of W = 4);
    # 2 is no longer kept; 8: written by a worker, no checkpoint names it yet (rank 0 was killed before)
    residuals.prune(tmp_path, [4, 6], {"residuals-00000006-rank1.pt": 7, "residuals-00000006-rank2.pt": 7})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "private", "residuals-00000004-rank1.pt"]
    assert sorted(p.name for p in private_dir(tmp_path).iterdir()) == [
        "residuals-00000004-rank2.pt", "residuals-00000006-rank1.pt", "residuals-00000006-rank2.pt"]


def test_a_checkpoint_prunes_and_a_finished_run_removes_every_residual_file(tmp_path):
    for v in (1, 2, 3):  # as runtime/snapshots.py writes a checkpoint
        touch(tmp_path, f"residuals-{v:08d}-rank1.pt")
        files = {f"residuals-{v:08d}-rank1.pt": 7}
        checkpoint.save(tmp_path, {"version": v, "residuals": files})
        residuals.retain(tmp_path, files)
    assert sorted(p.name for p in private_dir(tmp_path).iterdir()) == [
        "checkpoint-00000002.pt", "checkpoint-00000003.pt", "residuals-00000002-rank1.pt", "residuals-00000003-rank1.pt"]
    assert [p.name for p in tmp_path.iterdir()] == ["private"]
    touch(tmp_path, "residuals-00000004-rank1.pt.tmp")
    remove_checkpoints(tmp_path)
    assert list(tmp_path.iterdir()) == []  # private/ too, once empty


def test_rank_0_names_a_file_it_cannot_see_or_whose_size_differs(tmp_path):
    touch(tmp_path, "residuals-00000005-rank1.pt")
    assert residuals.check_written(tmp_path, 5, {1: 7}) == {"residuals-00000005-rank1.pt": 7}
    with pytest.raises(RuntimeError) as err:
        residuals.check_written(tmp_path, 5, {1: 8})
    where = private_dir(tmp_path) / "residuals-00000005-rank1.pt"
    assert str(err.value) == (f"worker rank 1 wrote its devices' residuals to {where} (8 bytes), but rank 0 sees 7 "
                              f"bytes: with compression.error_feedback on several nodes, the run dir must be on a "
                              f"filesystem every node shares")
    with pytest.raises(RuntimeError, match="rank 0 sees no such file"):
        residuals.check_written(tmp_path, 5, {1: 7, 2: 7})
    state = {"residuals": {"residuals-00000005-rank1.pt": 7, "residuals-00000005-rank2.pt": 7}}
    ck = private_dir(tmp_path) / "checkpoint-00000005.pt"  # its residual files are beside it
    assert "residuals-00000005-rank2.pt are missing" in checkpoint.residuals_missing(ck, state)
    assert checkpoint.residuals_missing(ck, {"residuals": {"residuals-00000005-rank1.pt": 7}}) is None
    assert checkpoint.residuals_missing(ck, {"residuals": {"residuals-00000005-rank1.pt": 8}}) == (
        f"its devices' residuals {where} are 7 bytes, not 8 (the run dir was "
        f"changed after the checkpoint)")


def test_gather_reads_the_devices_asked_for_from_every_listed_file(tmp_path):
    r = {d: torch.full((3,), float(d)) for d in range(5)}
    torch.save({"residuals": {0: r[0], 2: r[2], 4: r[4]}}, tmp_path / "residuals-00000001-rank1.pt")
    torch.save({"residuals": {1: r[1], 3: r[3]}}, tmp_path / "residuals-00000001-rank2.pt")
    torch.save({"residuals": {"residuals-00000001-rank1.pt": 1, "residuals-00000001-rank2.pt": 1}},
               tmp_path / "checkpoint-00000001.pt")
    got = residuals.gather(tmp_path / "checkpoint-00000001.pt", [1, 2, 9])
    assert sorted(got) == [1, 2] and torch.equal(got[1], r[1]) and torch.equal(got[2], r[2])
    assert sorted(residuals.gather(tmp_path / "checkpoint-00000001.pt")) == [0, 1, 2, 3, 4]


class Params(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n))
        self.frozen = torch.nn.Parameter(torch.zeros(1000), requires_grad=False)  # no residual


class Run:
    """What check_disk reads of a prepared run: its model and device count."""

    def __init__(self, params, devices):
        self.params, self.num_devices = params, devices

    def new_model(self):
        return Params(self.params)


def test_the_disk_refusal_counts_three_checkpoints_of_every_device_and_the_old_files_as_free(tmp_path):
    cfg = load_config(QUICKSTART, EF)
    need = 3 * 4 * 250 * 100  # (KEEP + 1) checkpoints x 4 bytes x 250 parameters x 100 devices = 300,000 bytes
    residuals.check_disk(cfg, Run(250, 100), tmp_path / "new", free=need)  # fits exactly
    with pytest.raises(ConfigError, match=r"^config key 'compression.error_feedback' has value True: .* 100 devices "
                                          r"\(0.0 MB a device; 2 kept and one being written\) take 0.3 MB, more than the 0.3 MB free"):
        residuals.check_disk(cfg, Run(250, 100), tmp_path / "new", free=need - 1)
    private_dir(tmp_path).mkdir()
    (private_dir(tmp_path) / "checkpoint-00000003.pt").write_bytes(b"x" * 600)
    (tmp_path / "residuals-00000003-rank1.pt").write_bytes(b"x" * 400)  # at the top: a run dir before the move
    residuals.check_disk(cfg, Run(250, 100), tmp_path, free=need - 1000)  # they are replaced: they count
    with pytest.raises(ConfigError):
        residuals.check_disk(cfg, Run(250, 100), tmp_path, free=need - 1001)
    residuals.check_disk(load_config(QUICKSTART, []), Run(250, 100), tmp_path, free=0)  # no error feedback


class Outbox:
    """What a worker sends rank 0, kept."""

    def __init__(self):
        self.sent = []

    def send(self, dst, header):
        self.sent.append((dst, header))


def test_a_workers_file_holds_each_devices_residual_before_its_first_job_not_taken_and_says_its_size(tmp_path):
    """SAVE(V) on worker rank 2: ``residuals-<V>-rank2.pt`` holds {format, V, rank, {device: r_k}} with r_k the
    residual before the device's first job the server has not taken (a resume trains that job again), and the
    worker answers SAVED with V and the file's bytes."""
    fb, outbox = ErrorFeedback(), Outbox()
    worker = residuals.WorkerResiduals(fb, tmp_path, 2, outbox)
    T = torch.tensor
    fb.keep(1, 10, 1.0, T([1.0, 2.0, 3.0]), T([1.0, 0.0, 0.0]))  # device 1: r = [0, 2, 3] after job 10
    fb.keep(1, 11, 2.0, T([4.0, 4.0, 4.0]), T([0.0, 4.0, 0.0]))  # then r = [4, 0, 4] after job 11
    fb.keep(3, 12, 1.5, T([5.0, 5.0]), T([5.0, 0.0]))  # device 3: r = [0, 5] after job 12
    fb.keep(5, 13, 3.0, T([7.0]), T([6.0]))  # device 5: its first job, not taken: no residual before it
    worker.taken(10)
    worker.taken(12)
    worker.save(7)
    path = private_dir(tmp_path) / "residuals-00000007-rank2.pt"
    saved = torch.load(path, weights_only=True)
    assert {k: saved[k] for k in ("format", "version", "rank")} == {"format": checkpoint.FORMAT, "version": 7,
                                                                     "rank": 2}
    assert sorted(saved["residuals"]) == [1, 3]  # device 5 had none before job 13
    assert saved["residuals"][1].tolist() == [0.0, 2.0, 3.0]  # before job 11, which a resume trains again
    assert saved["residuals"][3].tolist() == [0.0, 5.0]  # after job 12, taken
    assert outbox.sent == [(0, Header(SAVED, version=7, job=path.stat().st_size))]
    ck = private_dir(tmp_path) / "checkpoint-00000007.pt"  # a resume's
    torch.save({"residuals": {path.name: path.stat().st_size}}, ck)
    assert {d: r.tolist() for d, r in residuals.gather(ck).items()} == {
        1: [0.0, 2.0, 3.0], 3: [0.0, 5.0]}


def a_checkpoint(run_dir, cfg, **state):
    """private/checkpoint-00000004.pt of ``cfg``'s run as the server writes one (this code's stamp and config) with
    ``state``, its run files in the run dir; its path."""
    for name in ("events.jsonl", "metrics.csv"):
        (run_dir / name).write_bytes(b"")
    private_dir(run_dir).mkdir(exist_ok=True)
    path = private_dir(run_dir) / "checkpoint-00000004.pt"
    torch.save({"format": checkpoint.FORMAT, **stamp(), "config": dump_config(cfg), "version": 4,
                "events_bytes": 0, "metrics_bytes": 0, **state}, path)
    return path


def test_a_checkpoint_of_error_feedback_without_all_its_residuals_is_refused_in_one_line(tmp_path):
    cfg = load_config(QUICKSTART, EF)
    touch(tmp_path, "residuals-00000004-rank1.pt", "residuals-00000004-rank2.pt")
    files = {"residuals-00000004-rank1.pt": 7, "residuals-00000004-rank2.pt": 7}
    assert checkpoint.load(a_checkpoint(tmp_path, cfg, residuals=files), cfg)["residuals"] == files
    assert checkpoint.load(a_checkpoint(tmp_path, cfg, feedback={}), cfg)["feedback"] == {}  # one process: inline
    plain = load_config(QUICKSTART, [])
    assert checkpoint.load(a_checkpoint(tmp_path, plain), plain)["version"] == 4  # no error feedback: none needed
    fix = ("a run with compression.error_feedback cannot resume byte-identically without its devices' residuals",
           "delete it to resume from an older checkpoint, if any, or start afresh")
    path = a_checkpoint(tmp_path, cfg)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(path, cfg)
    one_line_message(str(err.value), f"checkpoint {path}: ", *fix, "(a torchrun run of an earlier seafl kept them")
    (private_dir(tmp_path) / "residuals-00000004-rank2.pt").unlink()
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(a_checkpoint(tmp_path, cfg, residuals=files), cfg)
    one_line_message(str(err.value), *fix, f"residuals {private_dir(tmp_path) / 'residuals-00000004-rank2.pt'} are missing")
    (private_dir(tmp_path) / "residuals-00000004-rank2.pt").write_bytes(b"x" * 9)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(a_checkpoint(tmp_path, cfg, residuals=files), cfg)
    one_line_message(str(err.value), *fix, "residuals-00000004-rank2.pt are 9 bytes, not 7")
