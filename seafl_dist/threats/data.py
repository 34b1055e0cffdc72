"""The attacks on a malicious device's data, made once, on the training set, before anything trains (every rank
makes the same from the config): the device knows its own shard.

- ``label_flip``: every sample of a malicious shard gets label C − 1 − y (C classes; Tolpegin et al.'s l → C − 1 − l).
- ``backdoor`` (BadNets' trigger, Gu et al. 2017): a share ``threats.backdoor_fraction`` of each malicious shard,
  ⌈fraction · n_k⌉ samples drawn without replacement from the stream ("backdoor", device), gets the trigger (a
  ``threats.trigger_size`` square at the image's bottom-right corner, every channel set to the set's brightest
  value: 255 for uint8 images) and the label ``threats.backdoor_target``.

The backdoor's success rate is the evaluation's accuracy on :func:`triggered_test`: the test images whose label
is not the target, with the trigger, labelled with the target. The shards are disjoint (overlapping ones are
refused), so no honest device's sample changes. The dataset loaded (and cached) is never modified: a copy is.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from seafl_dist.sim.rng import stream


def with_trigger(images: torch.Tensor, size: int) -> torch.Tensor:
    """``images`` (N, C, H, W), copied, with the trigger square in the bottom-right corner."""
    out = images.clone()
    bright = 255 if images.dtype == torch.uint8 else images.max()
    out[:, :, -size:, -size:] = bright
    return out


def backdoor_rows(shard: np.ndarray, fraction: float, seed: int, device: int) -> np.ndarray:
    """The rows of a malicious ``shard`` that get the trigger."""
    k = math.ceil(fraction * len(shard))
    pick = stream(seed, "backdoor", device).choice(len(shard), size=k, replace=False)
    return np.sort(np.asarray(shard, dtype=np.int64)[pick])


def poisoned(train, shards: list, malicious: tuple, threats, seed: int):
    """``train`` (an ArrayDataset) with the malicious devices' shards attacked (module doc), or ``train`` itself
    when the attack is not a data attack."""
    if threats.attack not in ("label_flip", "backdoor") or not malicious:
        return train
    images, labels = train.images, train.labels.clone()
    if threats.attack == "label_flip":
        rows = torch.as_tensor(np.concatenate([np.asarray(shards[d], dtype=np.int64) for d in malicious]))
        labels[rows] = train.num_classes - 1 - labels[rows]
    else:
        rows = torch.as_tensor(np.concatenate([backdoor_rows(shards[d], threats.backdoor_fraction, seed, d)
                                               for d in malicious]))
        images = images.clone()
        images[rows] = with_trigger(images[rows], threats.trigger_size)
        labels[rows] = threats.backdoor_target
    return dataclasses.replace(train, images=images, labels=labels)


def triggered_test(test, threats):
    """The backdoor's test set: ``test``'s images whose label is not the target, with the trigger, all labelled
    with the target."""
    keep = torch.nonzero(test.labels != threats.backdoor_target).flatten()
    images = with_trigger(test.images[keep], threats.trigger_size)
    return dataclasses.replace(test, images=images,
                               labels=torch.full((len(keep),), threats.backdoor_target, dtype=torch.int64))
