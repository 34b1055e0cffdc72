"""ResNet-18, CIFAR variant (He et al. 2016 as adapted for 32x32 images, e.g. kuangliu/pytorch-cifar).

Stem: conv 3x3 stride 1 -> 64, BN, ReLU, no max-pool. Four stages of two BasicBlocks each,
64/128/256/512 channels, strides 1/2/2/2; a block's shortcut is a 1x1 conv + BN when its
stride or width changes. Global average pool, then Linear(512, classes). All convs are
bias-free (BN follows). Parameters at width 1, 3 input channels, 10 classes: 11,173,962
(BN weights and biases included, running statistics not). ``width`` scales every channel count.
Any input size >= 8 works (the pool is adaptive).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import FLNet, scaled


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(FLNet):
    channels_last = True  # flattens with torch.flatten / nn.Flatten: fine with channels-last

    def __init__(self, num_classes: int, in_channels: int, *, width: float = 1.0, image_size: int = 32, optim=None):
        super().__init__(num_classes=num_classes, in_channels=in_channels, width=width, image_size=image_size, optim=optim)
        widths = [scaled(c, width) for c in (64, 128, 256, 512)]
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        blocks, c_in = [], widths[0]
        for c_out, stride in zip(widths, (1, 2, 2, 2)):
            blocks += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))
