"""Which worker trains a job (runtime.placement): balanced by queued optimiser steps, or fixed by device id."""
import pytest
import torch

from seafl_dist.settings import ConfigError, load_config
from seafl_dist.models import build_model
from seafl_dist.runtime.distributed import Placement, job_steps, owner_rank
from seafl_dist.train import flatten, train_job
from small_runs import QUICKSTART


@pytest.mark.parametrize("n,batch", [(1, 32), (31, 32), (32, 32), (33, 32), (34, 32), (65, 32), (7, 1), (10, 3)])
def test_job_steps_counts_the_steps_train_job_takes(n, batch):
    """Including the skipped trailing batch of one sample."""
    from seafl_dist.data import ArrayDataset
    data = ArrayDataset(torch.zeros(n, 1, 12, 12, dtype=torch.uint8), torch.zeros(n, dtype=torch.long), 10, "t", (0.5,), (0.5,))
    model = build_model("lenet5", 10, 1, image_size=12, lightning=False)
    steps = []
    train_job(model, flatten(model), data, torch.arange(n), epochs=2, batch_size=batch, seed=0,
              on_step=lambda: steps.append(1))
    assert job_steps(n, 2, batch) == len(steps)


def test_balanced_placement_splits_a_round_evenly_and_tracks_returns():
    p = Placement("balanced", 3, [600] * 100, 32)  # two workers, W1's shards: 19 steps an epoch
    ranks = [p.pick(job, device, 5) for job, device in enumerate([0, 2, 4, 6, 8, 10, 12, 14, 16, 18])]
    assert ranks.count(1) == ranks.count(2) == 5  # fixed placement would put all ten on worker 1
    assert p.queued == {1: 5 * 95, 2: 5 * 95}
    for job in range(4):
        p.done(job)  # jobs 0, 2 went to worker 1; 1, 3 to worker 2
    assert p.queued == {1: 3 * 95, 2: 3 * 95}
    p.done(0)  # a job returned twice (or never sent) changes nothing
    assert p.queued == {1: 3 * 95, 2: 3 * 95}


def test_balanced_placement_weighs_jobs_by_their_steps():
    p = Placement("balanced", 3, [640, 64, 64, 64], 32)  # device 0: 20 steps an epoch, the others 2
    assert p.pick(0, 0, 1) == 1
    assert [p.pick(j, j, 1) for j in (1, 2, 3)] == [2, 2, 2]  # 6 steps on worker 2 still < 20 on worker 1
    assert p.pick(4, 1, 10) == 2  # 6 < 20: worker 2 again, now 26
    assert p.pick(5, 2, 1) == 1


def test_device_placement_is_the_documented_mapping():
    p = Placement("device", 4, [10] * 9, 5)
    assert [p.pick(j, d, 1) for j, d in enumerate(range(9))] == [owner_rank(d, 4) for d in range(9)] == [1, 2, 3] * 3
    assert p.devices_of(2, 9) == [1, 4, 7]
    assert Placement("balanced", 4, [10] * 9, 5).devices_of(2, 9) == list(range(9))


def test_placement_is_checked_at_config_load():
    assert load_config(QUICKSTART).runtime.placement == "balanced"
    with pytest.raises(ConfigError, match="runtime.placement"):
        load_config(QUICKSTART, ["runtime.placement=round_robin"])
