"""Flat vectors (train/flat.py) and local training of one job (train/local.py)."""
import pytest
import torch
from torch import nn

from seafl_dist.settings import TrainConfig
from seafl_dist.data import load_dataset
from seafl_dist.models import build_model
from seafl_dist.train import evaluate, flatten, load_flat, train_job


def bn_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 2))


# ---- flat.py --------------------------------------------------------------------------

def test_flat_round_trip_carries_parameters_and_batch_norm_buffers():
    src = bn_net()
    src.train()
    for _ in range(3):  # move running stats away from their init; num_batches_tracked -> 3
        src(torch.randn(4, 1, 6, 6))
    with torch.no_grad():
        src[0].weight.add_(1.0)
    flat = flatten(src)
    names = list(src.state_dict())
    assert flat.dtype == torch.float32 and flat.dim() == 1
    assert flat.numel() == sum(t.numel() for t in src.state_dict().values())
    assert "1.running_mean" in names and "1.num_batches_tracked" in names

    dst = bn_net()
    load_flat(dst, flat)
    for (name, a), b in zip(src.state_dict().items(), dst.state_dict().values()):
        assert a.dtype == b.dtype, name
        assert torch.equal(a, b), name
    assert dst[1].num_batches_tracked.dtype == torch.int64 and int(dst[1].num_batches_tracked) == 3
    assert torch.equal(flatten(dst), flat)


def test_flatten_is_a_copy():
    net = bn_net()
    flat = flatten(net)
    before = net[4].weight.detach().clone()
    flat.zero_()
    assert torch.equal(net[4].weight, before)


def test_integer_buffers_are_rounded_back():
    net = bn_net()
    flat = flatten(net)
    names = list(net.state_dict())
    pos = sum(t.numel() for t in list(net.state_dict().values())[:names.index("1.num_batches_tracked")])
    flat[pos] = 6.9999  # an average of counts need not be an integer
    load_flat(net, flat)
    assert int(net[1].num_batches_tracked) == 7


@pytest.mark.parametrize("bad", [lambda f: f[:-1], lambda f: torch.cat([f, f[:1]]), lambda f: f.view(1, -1)])
def test_wrong_size_is_rejected_and_leaves_the_model_alone(bad):
    net = bn_net()
    before = flatten(net)
    with pytest.raises(ValueError, match="flat vector has shape"):
        load_flat(net, bad(before.clone() + 1))
    assert torch.equal(flatten(net), before)


# ---- local.py -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="module")
def setup(digits):
    def model():
        return build_model("lenet5", 10, 1, image_size=28, optim=TrainConfig(lr=0.05, momentum=0.9))
    torch.manual_seed(0)
    start = flatten(model())
    idx = torch.arange(160)
    return model, start, idx


def train(setup, digits, seed=1, epochs=2, **kw):
    model, start, idx = setup
    return train_job(model(), start, digits, idx, epochs=epochs, batch_size=16, seed=seed, **kw)


def test_same_seed_same_bits_other_seed_other_bits(setup, digits):
    a = train(setup, digits, seed=7)
    assert torch.equal(a, train(setup, digits, seed=7))
    assert not torch.equal(a, train(setup, digits, seed=8))


def test_start_vector_is_not_modified(setup, digits):
    _, start, _ = setup
    before = start.clone()
    train(setup, digits, epochs=1)
    assert torch.equal(start, before)


def test_training_lowers_the_loss_on_the_shard(setup, digits):
    model, start, idx = setup
    shard = digits.__class__(digits.images[idx], digits.labels[idx], 10, "shard", digits.mean, digits.std)
    _, loss0 = evaluate(model(), start, shard)
    acc1, loss1 = evaluate(model(), train(setup, digits, epochs=3), shard)
    assert loss1 < 0.8 * loss0 and acc1 > 0.4


def count_steps(monkeypatch):
    calls = []
    orig = type(build_model("lenet5", 10, 1)).training_step

    def counting(self, batch, batch_idx):
        calls.append(len(batch[1]))
        return orig(self, batch, batch_idx)
    monkeypatch.setattr(type(build_model("lenet5", 10, 1)), "training_step", counting)
    return calls


@pytest.mark.parametrize("epochs", [1, 3])
def test_epochs_count_is_respected(setup, digits, monkeypatch, epochs):
    model, start, _ = setup
    calls = count_steps(monkeypatch)
    train_job(model(), start, digits, torch.arange(40), epochs=epochs, batch_size=16, seed=0)
    assert calls == [16, 16, 8] * epochs  # every sample once per epoch


def test_a_trailing_batch_of_one_is_skipped(setup, digits, monkeypatch):
    model, start, _ = setup
    calls = count_steps(monkeypatch)
    train_job(model(), start, digits, torch.arange(33), epochs=2, batch_size=16, seed=0)
    assert calls == [16, 16] * 2


def test_batch_size_one_trains_every_sample(setup, digits, monkeypatch):
    model, start, _ = setup
    calls = count_steps(monkeypatch)
    steps = []
    out = train_job(model(), start, digits, torch.arange(5), epochs=2, batch_size=1, seed=0,
                    on_step=lambda: steps.append(1))
    assert calls == [1] * 10 and len(steps) == 10  # on_step after every optimiser step
    assert not torch.equal(out, start)


def test_epoch_orders_come_from_the_job_seed(setup, digits, monkeypatch):
    model, start, _ = setup
    seen = []
    orig = digits.batch

    def spy(idx, **kw):
        seen.append(idx.clone())
        return orig(idx, **kw)
    monkeypatch.setattr(digits, "batch", spy)
    train_job(model(), start, digits, torch.arange(20, 52), epochs=2, batch_size=32, seed=3)
    assert len(seen) == 2
    assert sorted(seen[0].tolist()) == list(range(20, 52)) == sorted(seen[1].tolist())
    assert not torch.equal(seen[0], seen[1])  # reshuffled every epoch


def test_a_torch_seed_changes_no_bit_of_a_model_without_random_layers(setup, digits):
    """The job's random state is forked and seeded; LeNet-5 draws nothing, so its bits are those of
    a job trained with the caller's generators (the built-in models' runs stay bit for bit)."""
    a = train(setup, digits, seed=7)
    assert torch.equal(a, train(setup, digits, seed=7, torch_seed=123))
    assert torch.equal(a, train(setup, digits, seed=7, torch_seed=456))
