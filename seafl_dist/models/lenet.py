"""LeNet-5 for 28x28x1 (MNIST, EMNIST, digits) and 32x32x3 (CIFAR-size) inputs.

conv 5x5 (pad 2) -> 6, ReLU, max-pool 2, conv 5x5 -> 16, ReLU, max-pool 2, fc 120, fc 84, fc classes.
The padding keeps a 28x28 input at 28x28 after the first conv, so the flatten is 16x5x5 = 400 as
in LeCun et al. 1998; a 32x32 input gives 16x6x6 = 576 (computed from ``image_size``). ReLU and
max-pooling replace the original tanh and trainable sub-sampling, the variant FL papers use.
Parameters at width 1: 61,706 for 28x28x1 / 10 classes; 83,126 for 32x32x3 / 10 classes.
``width`` scales every hidden width (6, 16, 120, 84).
"""
from __future__ import annotations

import torch
from torch import nn

from .base import FLNet, scaled


class LeNet5(FLNet):
    channels_last = True  # flattens with torch.flatten / nn.Flatten: fine with channels-last

    def __init__(self, num_classes: int, in_channels: int, *, width: float = 1.0, image_size: int = 28, optim=None):
        super().__init__(num_classes=num_classes, in_channels=in_channels, width=width, image_size=image_size, optim=optim)
        side = (image_size // 2 - 4) // 2  # after conv(pad 2), pool, conv(no pad), pool
        if side < 1:
            raise ValueError(f"lenet5 needs image_size >= 12, got {image_size}")
        c1, c2, h1, h2 = (scaled(c, width) for c in (6, 16, 120, 84))
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(c2 * side * side, h1), nn.ReLU(inplace=True),
            nn.Linear(h1, h2), nn.ReLU(inplace=True), nn.Linear(h2, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
