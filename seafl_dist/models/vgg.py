"""VGG-16 with batch norm, CIFAR-size classifier (Simonyan & Zisserman 2015, configuration D,
as adapted for 32x32 images, e.g. kuangliu/pytorch-cifar).

Features: 64, 64, M, 128, 128, M, 256 x3, M, 512 x3, M, 512 x3, M, each number a 3x3 conv
(pad 1, with bias) + BN + ReLU, M a 2x2 max-pool. Then Linear(512, classes): the three 4096-wide
layers of the ImageNet model are dropped, since a 32x32 input is 1x1 after five pools.
Parameters at width 1, 3 input channels, 10 classes: 14,728,266 (14,714,688 in the convs incl.
their biases, 8,448 in BN weights and biases, 5,130 in the classifier; running statistics not
counted). Pools use ``ceil_mode=True`` so 28x28 inputs (digits, MNIST) reach 1x1 too
(28, 14, 7, 4, 2, 1); for 32x32 this changes nothing. An adaptive average pool to 1x1 keeps
larger inputs working. ``width`` scales every channel count.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import FLNet, scaled

VGG16_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG16(FLNet):
    channels_last = True  # flattens with torch.flatten / nn.Flatten: fine with channels-last

    def __init__(self, num_classes: int, in_channels: int, *, width: float = 1.0, image_size: int = 32, optim=None):
        super().__init__(num_classes=num_classes, in_channels=in_channels, width=width, image_size=image_size, optim=optim)
        layers: list[nn.Module] = []
        c_in = in_channels
        for v in VGG16_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            else:
                c_out = scaled(v, width)
                layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
                c_in = c_out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))
