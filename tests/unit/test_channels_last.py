"""The built-in models train and evaluate channels-last, on a CPU too (numerics version 2,
train/local.py's ``memory_format``); a model that does not declare it is left as PyTorch makes it.

Training: a job's bits are those of a bare loop that lays the model and its images out
channels-last, and not those of the NCHW loop numerics version 1 trained (the layout is what
changed the bits). A model with a strided 1x1 convolution of fewer than 16 input channels
(ResNet-18 below width 0.25) trains NCHW on a CPU: oneDNN's channels-last weight gradient of such
a convolution writes out of bounds (uxlfoundation/oneDNN#6035). Evaluation: the same accuracy and
loss as the plain layout.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seafl_dist.data import ArrayDataset
from seafl_dist.models import build_model
from seafl_dist.settings import TrainConfig
from seafl_dist.train import evaluate, flatten, load_flat, train_job
from seafl_dist.train.local import memory_format, narrow_strided_1x1
from seafl_dist.train.plan import StepPlan

MODELS = [("lenet5", 1, 28, 1.0), ("resnet18", 3, 32, 0.25), ("vgg16", 3, 32, 0.125)]
CPU = torch.device("cpu")
OPTIM = TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-4)


def _data(n, channels, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ArrayDataset(torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10, "t", (0.5,) * channels, (0.25,) * channels)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: bits compared on one thread


def bare_job(name, channels, size, width, start, data, idx, fmt):
    """A hand-written loop over the job's batches, with the model and images laid out in ``fmt``."""
    net = build_model(name, 10, channels, width=width, image_size=size, optim=OPTIM, lightning=False)
    net.to(memory_format=fmt)
    load_flat(net, start)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=OPTIM.lr, momentum=OPTIM.momentum, weight_decay=OPTIM.weight_decay)
    for _, b, _ in StepPlan(idx, 1, 16, 3).batches():
        x, y = data.batch(b)
        loss = F.cross_entropy(net(x.contiguous(memory_format=fmt)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return flatten(net)


@pytest.mark.parametrize("name,channels,size,width", MODELS)
def test_a_job_on_a_cpu_trains_channels_last(name, channels, size, width):
    data, idx = _data(64, channels, size), torch.arange(48)
    torch.manual_seed(0)
    model = build_model(name, 10, channels, width=width, image_size=size, optim=OPTIM, lightning=False)
    assert model.channels_last
    start = flatten(model)
    got = train_job(model, start, data, idx, epochs=1, batch_size=16, seed=3)
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got, bare_job(name, channels, size, width, start, data, idx, torch.channels_last))
    nchw = bare_job(name, channels, size, width, start, data, idx, torch.contiguous_format)
    # other rounding only, but not necessarily close: one max-pool window whose two largest inputs
    # round the other way round routes that gradient elsewhere (VGG-16 here: 4% of every gradient)
    assert not torch.equal(got, nchw), "channels-last trained numerics version 1's NCHW bits"


def test_a_model_that_would_meet_onednns_1x1_bug_trains_nchw_on_a_cpu():
    data, idx = _data(64, 3, 32), torch.arange(48)
    torch.manual_seed(0)
    model = build_model("resnet18", 10, 3, width=0.125, image_size=32, optim=OPTIM, lightning=False)
    assert narrow_strided_1x1(model) == "layers.2.shortcut.0"  # 8 input channels, stride 2
    assert memory_format(model, CPU) == torch.contiguous_format
    assert memory_format(model, CPU, training=False) == torch.channels_last  # forward only: unaffected
    assert memory_format(model, torch.device("cuda")) == torch.channels_last  # cuDNN: unaffected
    start = flatten(model)
    got = train_job(model, start, data, idx, epochs=1, batch_size=16, seed=3)
    assert torch.equal(got, bare_job("resnet18", 3, 32, 0.125, start, data, idx, torch.contiguous_format))
    wide = build_model("resnet18", 10, 3, width=0.25, image_size=32, lightning=False)
    assert narrow_strided_1x1(wide) is None and memory_format(wide, CPU) == torch.channels_last


@pytest.mark.parametrize("name,channels,size,width", [*MODELS, ("resnet18", 3, 32, 0.125)])
def test_channels_last_evaluation_matches_the_plain_layout(name, channels, size, width):
    data = _data(300, channels, size)
    model = build_model(name, 10, channels, width=width, image_size=size, lightning=False)
    torch.manual_seed(1)
    for p in model.parameters():  # away from the initialisation, so the logits are not all alike
        p.data.add_(0.05 * torch.randn_like(p))
    flat = flatten(model)
    acc, loss = evaluate(model, flat, data, batch_size=128)
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)  # it did run channels-last
    plain = build_model(name, 10, channels, width=width, image_size=size, lightning=False)
    plain.channels_last = False
    acc0, loss0 = evaluate(plain, flat, data, batch_size=128)
    assert acc == acc0
    assert loss == pytest.approx(loss0, rel=1e-5)
    assert torch.equal(flatten(model), flat)  # the weights read back unchanged, in the plain order


class ViewsItsInput(nn.Module):
    """A user's model that flattens with .view: it cannot take a channels-last input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(self.conv(x).view(x.size(0), -1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SaysChannelsLast(ViewsItsInput):
    """A user's model that flattens with torch.flatten and declares it (docs/extending.md)."""

    channels_last = True

    def forward(self, x):
        return self.fc(torch.flatten(self.conv(x), 1))


def test_a_users_model_that_declares_it_trains_channels_last():
    torch.manual_seed(0)
    model, data = SaysChannelsLast(), _data(50, 3, 8)
    start = flatten(model)
    trained = train_job(model, start, data, torch.arange(40), epochs=1, batch_size=16, seed=0)
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last) and not torch.equal(trained, start)
    model.channels_last = False  # the same model, undeclared: as PyTorch makes it
    train_job(model, start, data, torch.arange(40), epochs=1, batch_size=16, seed=0)
    assert model.conv.weight.is_contiguous() and not model.conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_a_model_without_the_flag_trains_and_is_evaluated_as_it_is():
    model, data = ViewsItsInput(), _data(50, 3, 8)
    acc, loss = evaluate(model, flatten(model), data, batch_size=16)
    assert 0.0 <= acc <= 1.0 and loss > 0
    trained = train_job(model, flatten(model), data, torch.arange(40), epochs=1, batch_size=16, seed=0)
    assert model.conv.weight.is_contiguous() and trained.isfinite().all()
