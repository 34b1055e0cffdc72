"""The fused step (train/batched.py) against torch.optim.SGD job by job, in fp32; frozen parameters;
what the fused step refuses before training (fusion_blocker).

The comparison is on each job's *update* (trained minus start), split into parameters and
batch-norm statistics, after a few steps (few enough that fp32 rounding stays rounding): a fused
step without weight decay, without momentum, or without the statistics update is off by 1e-2 or
more there, the rounding of grouped convolutions by about 1e-6.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seafl_dist.data import ArrayDataset
from seafl_dist.models import FLNet
from seafl_dist.settings import TrainConfig
from seafl_dist.train import FlatLayout, StepPlan, flatten, fusion_blocker, load_flat, train_job, train_jobs

SHARDS = [24, 20, 17, 5]  # step 0 already has two batch sizes (8 and 5); 17 drops a trailing single sample
EPOCHS = [2, 2, 1, 3]
OPTIM = TrainConfig(lr=0.05, momentum=0.9, weight_decay=0.05, batch_size=8)
TOL = 1e-4


class SmallBN(FLNet):
    """Conv, batch norm, linear: every part of the fused step in a model that trains in milliseconds."""

    def __init__(self, optim=OPTIM, frozen=False):
        super().__init__(num_classes=4, in_channels=1, width=1.0, image_size=8, optim=optim)
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 4)
        if frozen:
            self.conv.requires_grad_(False)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).flatten(1))


def images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    imgs = torch.randint(0, 256, (n, 1, 8, 8), dtype=torch.uint8, generator=g)
    imgs[torch.arange(n), 0, 2 * labels] = 255  # a bright row per class: learnable
    return ArrayDataset(imgs, labels, 4, "bands", (0.5,), (0.25,))


def setup(**kw):
    data = images(sum(SHARDS))
    shards = list(torch.arange(sum(SHARDS)).split(SHARDS))
    starts = []
    for j in range(len(SHARDS)):
        torch.manual_seed(j)
        starts.append(flatten(SmallBN(**kw)))
    return data, shards, starts


def sgd_alone(start, data, idx, epochs, seed, **kw):
    """One job with torch.optim.SGD, written out: the reference the fused step must match."""
    net = SmallBN(**kw)
    load_flat(net, start)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=OPTIM.lr, momentum=OPTIM.momentum, weight_decay=OPTIM.weight_decay)
    for _, batch, _ in StepPlan(idx, epochs, OPTIM.batch_size, seed).batches():
        x, y = data.batch(batch)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return flatten(net)


def rel(a, b):
    return float((a - b).norm() / b.norm())


def test_fused_sgd_matches_torch_sgd_job_by_job_fp32():
    torch.set_num_threads(1)
    data, shards, starts = setup()
    net = SmallBN()
    assert fusion_blocker(net, data) is None
    steps = []
    fused = train_jobs(net, starts, data, shards, epochs=EPOCHS, batch_size=OPTIM.batch_size, seeds=[5, 6, 7, 8],
                       on_step=lambda: steps.append(1))
    plans = [StepPlan(i, e, OPTIM.batch_size, 0) for i, e in zip(shards, EPOCHS)]
    assert len(steps) < sum(p.steps for p in plans)  # it fused
    layout = FlatLayout.of(net)
    param, stat = layout.mask("param"), layout.mask("stat")
    for j, seed in enumerate([5, 6, 7, 8]):
        alone = sgd_alone(starts[j], data, shards[j], EPOCHS[j], seed)
        moved, want = fused[j] - starts[j], alone - starts[j]
        err_p, err_s = rel(moved[param], want[param]), rel(moved[stat], want[stat])
        print(f"job {j}: update relative L2 difference, parameters {err_p:.1e}, statistics {err_s:.1e}")
        assert err_p <= TOL and err_s <= TOL, (j, err_p, err_s)
        assert torch.equal(fused[j][layout.mask("counter")], alone[layout.mask("counter")])  # steps taken


@pytest.mark.parametrize("g", [1, 4])
def test_frozen_parameters_stay_frozen(g):
    data, shards, starts = setup(frozen=True)
    net = SmallBN(frozen=True)
    names = list(net.state_dict())
    layout = FlatLayout.of(net)
    out = train_jobs(net, starts[:g], data, shards[:g], epochs=EPOCHS[:g], batch_size=8, seeds=list(range(g)))
    for j in range(g):
        before, after = layout.split(starts[j]), layout.split(out[j])
        assert torch.equal(after["conv.weight"], before["conv.weight"]) and torch.equal(after["conv.bias"],
                                                                                          before["conv.bias"])
        assert not torch.equal(after["fc.weight"], before["fc.weight"])  # the rest trained
        assert layout.kinds[names.index("conv.weight")] == "stat"  # and no aggregation counts it as trained
        alone = train_job(net, starts[j], data, shards[j], epochs=EPOCHS[j], batch_size=8, seed=j)
        assert rel(out[j], alone) <= 1e-6


class DropsInForward(FLNet):
    """Random numbers drawn in forward without a Dropout module: only the probe step can see them."""

    def __init__(self):
        super().__init__(num_classes=4, in_channels=1, width=1.0, image_size=8)
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc(F.dropout(x.flatten(1), 0.2, self.training))


class ItemInForward(SmallBN):
    def forward(self, x):
        return super().forward(x) * float(x.abs().max().item() > 0)


@pytest.mark.parametrize("make,why", [
    (lambda: nn.Sequential(), "its own training_step or configure_optimizers"),
    (lambda: DropsInForward(), "its forward draws random numbers"),
    (lambda: ItemInForward(), "torch.func.vmap rejects its forward (RuntimeError: vmap: It looks like"),
])
def test_what_the_fused_step_cannot_train_is_found_before_training(make, why):
    data, shards, starts = setup()
    net = make()
    assert why in fusion_blocker(net, data)
    if isinstance(net, FLNet):  # trained one job at a time: each equals the job alone, bit for bit
        starts = [flatten(net)] * 2
        out = train_jobs(net, starts, data, shards[:2], epochs=[1, 1], batch_size=8, seeds=[1, 2], torch_seeds=[3, 4])
        for j in range(2):
            assert torch.equal(out[j], train_job(net, starts[j], data, shards[j], epochs=1, batch_size=8, seed=j + 1,
                                                 torch_seed=j + 3))


def test_a_job_draws_from_its_own_torch_seed_and_leaves_the_callers_generator_alone():
    data, shards, _ = setup()
    net = DropsInForward()
    start = flatten(net)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a = train_job(net, start, data, shards[0], epochs=1, batch_size=8, seed=1, torch_seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a, train_job(net, start, data, shards[0], epochs=1, batch_size=8, seed=1, torch_seed=7))
    assert not torch.equal(a, train_job(net, start, data, shards[0], epochs=1, batch_size=8, seed=1, torch_seed=8))


def test_both_trainers_take_the_batches_of_the_step_plan(monkeypatch):
    """train_job and the fused train_jobs feed data.batch exactly the plan's batches, in order
    (augmentation draws included), so the plan is the one place that decides them."""
    data, shards, starts = setup()
    seen = []
    orig = data.batch

    def spy(idx, **kw):
        seen.append((idx.clone(), kw.get("draws")))
        return orig(idx, **kw)
    monkeypatch.setattr(data, "batch", spy)
    plans = [StepPlan(i, e, 8, seed, augment=True) for i, e, seed in zip(shards, EPOCHS, [5, 6, 7, 8])]
    wanted = [list(p.batches(data.augment_draws)) for p in plans]
    train_job(SmallBN(), starts[0], data, shards[0], epochs=EPOCHS[0], batch_size=8, seed=5, augment=True)
    assert len(seen) == len(wanted[0]) == plans[0].steps
    for (idx, draws), (_, want_idx, want_draws) in zip(seen, wanted[0]):
        assert torch.equal(idx, want_idx) and all(torch.equal(a, b) for a, b in zip(draws, want_draws))
    seen.clear()
    train_jobs(SmallBN(), starts, data, shards, epochs=EPOCHS, batch_size=8, seeds=[5, 6, 7, 8], augment=True)
    got = [[] for _ in plans]
    assert seen[0][1] is None  # fusion_blocker's probe step (two rows, not augmented), before training
    for idx, draws in seen[1:]:  # a fused batch is its jobs' batches one after another; a job's rows are its shard's
        for j, shard in enumerate(shards):
            mine = torch.isin(idx, shard)
            if mine.any():
                got[j].append((idx[mine], tuple(d[mine] for d in draws)))
    for j in range(len(plans)):
        assert len(got[j]) == plans[j].steps
        for (idx, draws), (_, want_idx, want_draws) in zip(got[j], wanted[j]):
            assert torch.equal(idx, want_idx) and all(torch.equal(a, b) for a, b in zip(draws, want_draws))
