"""Evaluation on a CPU runs the built-in models channels-last: the same accuracy and loss as the
plain layout, and a model that does not declare it is left as it is."""
import pytest
import torch
from torch import nn

from seafl_dist.data import ArrayDataset
from seafl_dist.models import build_model
from seafl_dist.train import evaluate, flatten


def _data(n, channels, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ArrayDataset(torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g),
                        torch.randint(0, 10, (n,), generator=g), 10, "t", (0.5,) * channels, (0.25,) * channels)


@pytest.mark.parametrize("name,channels,size,width", [("lenet5", 1, 28, 1.0), ("resnet18", 3, 32, 0.125),
                                                      ("vgg16", 3, 32, 0.125)])
def test_channels_last_evaluation_matches_the_plain_layout(name, channels, size, width):
    data = _data(300, channels, size)
    model = build_model(name, 10, channels, width=width, image_size=size, lightning=False)
    assert model.channels_last_eval
    torch.manual_seed(1)
    for p in model.parameters():  # away from the initialisation, so the logits are not all alike
        p.data.add_(0.05 * torch.randn_like(p))
    flat = flatten(model)
    acc, loss = evaluate(model, flat, data, batch_size=128)
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)  # it did run channels-last
    plain = build_model(name, 10, channels, width=width, image_size=size, lightning=False)
    plain.channels_last_eval = False
    acc0, loss0 = evaluate(plain, flat, data, batch_size=128)
    assert acc == acc0
    assert loss == pytest.approx(loss0, rel=1e-5)
    assert torch.equal(flatten(model), flat)  # the weights read back unchanged, in the plain order


class ViewsItsInput(nn.Module):
    """A user's model that flattens with .view: it cannot take a channels-last input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(x.view(x.size(0), -1))


def test_a_model_without_the_flag_is_evaluated_as_it_is():
    model = ViewsItsInput()
    acc, loss = evaluate(model, flatten(model), _data(50, 3, 8), batch_size=16)
    assert 0.0 <= acc <= 1.0 and loss > 0
