"""Models: shapes, exact parameter counts of the standard variants, one SGD step, BN buffers."""
from __future__ import annotations

import pytest
import torch

from seafl_dist.settings import TrainConfig
from seafl_dist.models import FLModule, build_model


@pytest.mark.parametrize("name", ["lenet5", "resnet18", "vgg16"])
@pytest.mark.parametrize("in_channels, size, classes", [(1, 28, 10), (3, 32, 47)])
def test_output_shape_at_small_width(name, in_channels, size, classes):
    torch.manual_seed(0)
    model = build_model(name, classes, in_channels, width=0.125, image_size=size)
    assert isinstance(model, FLModule)
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(3, in_channels, size, size)).shape == (3, classes)


@pytest.mark.parametrize("name, in_channels, size, params", [
    ("lenet5", 1, 28, 61_706),  # 156 + 2,416 + 48,120 + 10,164 + 850 (LeCun et al. 1998 with a padded first conv)
    ("lenet5", 3, 32, 83_126),  # flatten 16x6x6 = 576 instead of 400
    ("resnet18", 3, 32, 11_173_962),  # the CIFAR ResNet-18 figure (BN affine included)
    ("vgg16", 3, 32, 14_728_266),  # convs 14,714,688 + BN 8,448 + Linear(512, 10) 5,130
])
def test_parameter_counts_of_standard_variants(name, in_channels, size, params):
    model = build_model(name, 10, in_channels, image_size=size)
    assert model.num_parameters() == params == sum(p.numel() for p in model.parameters())


def test_width_scales_channels_with_at_least_one():
    tiny = build_model("resnet18", 10, 3, width=0.001, image_size=32)
    assert tiny.stem[0].out_channels == 1 and tiny.fc.in_features == 1
    assert build_model("vgg16", 10, 3, width=0.5).classifier.in_features == 256


@pytest.mark.parametrize("name", ["resnet18", "vgg16"])
def test_batch_norm_running_stats_are_buffers(name):
    model = build_model(name, 10, 3, width=0.125, image_size=32)
    buffers = dict(model.named_buffers())
    assert any(k.endswith("running_mean") for k in buffers) and any(k.endswith("running_var") for k in buffers)
    assert set(buffers) <= set(model.state_dict())  # they travel with the parameters
    before = {k: v.clone() for k, v in buffers.items()}
    model.train()
    model(torch.randn(4, 3, 32, 32))
    assert any(not torch.equal(before[k], v) for k, v in model.named_buffers() if k.endswith("running_mean"))


# a safe step size per model (LeNet's gradients are small at init; VGG overshoots at 0.05 for some seeds)
@pytest.mark.parametrize("name, in_channels, size, lr", [("lenet5", 1, 28, 0.1), ("resnet18", 3, 32, 0.01),
                                                         ("vgg16", 3, 32, 0.01)])
def test_one_sgd_step_lowers_the_loss(name, in_channels, size, lr):
    torch.manual_seed(0)
    model = build_model(name, 10, in_channels, width=0.25, image_size=size, optim=TrainConfig(lr=lr, momentum=0.9))
    x, y = torch.randn(16, in_channels, size, size), torch.arange(16) % 10
    model.train()  # BN normalises with the batch's own statistics: the same function before and after
    with torch.no_grad():
        before = torch.nn.functional.cross_entropy(model(x), y).item()
    opt = model.configure_optimizers()
    loss = model.training_step((x, y), 0)
    assert loss.item() == pytest.approx(before, rel=1e-5)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        after = torch.nn.functional.cross_entropy(model(x), y).item()
    assert after < before


def test_optimizer_comes_from_train_config():
    opt = build_model("lenet5", 10, 1, optim=TrainConfig(lr=0.2, momentum=0.5, weight_decay=1e-4)).configure_optimizers()
    assert isinstance(opt, torch.optim.SGD)
    group = opt.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.2, 0.5, 1e-4)
    default = build_model("lenet5", 10, 1).configure_optimizers().param_groups[0]
    assert (default["lr"], default["momentum"], default["weight_decay"]) == (0.01, 0.0, 0.0)


def test_unknown_model_and_too_small_images():
    with pytest.raises(ValueError, match="lenet5"):
        build_model("alexnet", 10, 3)
    with pytest.raises(ValueError, match="image_size"):
        build_model("lenet5", 10, 1, image_size=8)
