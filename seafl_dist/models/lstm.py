"""The stacked character LSTM of LEAF's Shakespeare baseline (models/shakespeare/stacked_lstm.py),
as the FL literature runs it (Caldas et al. 2018, after McMahan et al. 2017).

Embedding of the ``in_channels``-character vocabulary into 8 dimensions, two LSTM layers of 256
units (batch first), and a linear layer from the last step's output to ``num_classes`` logits:
the next character. It takes token ids ``(N, L)`` int64 (``inputs = "tokens"``), any L; a dataset of
images is refused before it gets here (settings/core.py, runtime/model_checks.py). ``width`` scales
the embedding and the hidden size (at least 1 each), so tests can use a tiny one.
Parameters at width 1, 80 characters: 819,920. PyTorch's LSTM has two bias vectors a layer (input
and hidden) where LEAF's TensorFlow ``BasicLSTMCell`` has one: 2,048 more than LEAF's 817,872, the
same function.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import FLNet, scaled


class CharLSTM(FLNet):
    inputs = "tokens"

    def __init__(self, num_classes: int, in_channels: int, *, width: float = 1.0, image_size: int = 80, optim=None):
        super().__init__(num_classes=num_classes, in_channels=in_channels, width=width, image_size=image_size,
                         optim=optim)
        embed, hidden = scaled(8, width), scaled(256, width)
        self.embedding = nn.Embedding(in_channels, embed)  # in_channels: the vocabulary (ArrayDataset.in_channels)
        self.lstm = nn.LSTM(embed, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))
        return self.fc(out[:, -1])
