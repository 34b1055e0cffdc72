"""The residual files of a torchrun run with error feedback (runtime/residuals.py): which go with which checkpoint,
what rank 0 checks of them, and the disk refusal before anything is written."""
from pathlib import Path

import pytest
import torch

from seafl_dist.runtime import checkpoint, residuals
from seafl_dist.runtime.rundir import private_dir, remove_checkpoints
from seafl_dist.settings import ConfigError, load_config
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
