"""A classification dataset held in memory as one tensor, served in batches by index: images, or
sequences of token ids (Shakespeare's next-character prediction).

    ds = load_dataset("cifar10", root="data")          # an ArrayDataset
    x, y = ds.batch(torch.tensor([0, 5, 9]), augment=True, generator=g, device="cuda")

Token sequences are ``(N, L)`` uint8 or int64 ids (uint8 for a vocabulary of at most 256, as
Shakespeare's 80 characters: 8x less memory); :meth:`~ArrayDataset.batch` hands them over as int64
ids, neither scaled nor normalised, and refuses ``augment`` (crop and flip are for images; the
config refuses ``data.augment`` for such a dataset before it gets here). ``inputs`` says which a
dataset holds, and a built-in model says which it takes (models/base.py), so a pairing that
cannot work is refused in one line (settings/core.py, runtime/model_checks.py).

A device's shard is an index array into ``ds`` (see :func:`seafl_dist.data.partition`), never
a copy: every simulated device in a process reads the same ``images`` tensor. Images stay uint8
(CINIC-10's 90k training images take 276 MB instead of 1.1 GB as float32); :meth:`batch`
converts only the requested rows to normalised float32.

Augmentation (``augment=True``) is the standard CIFAR recipe, done as one batched gather:
zero-pad 4 pixels on each side (zero in pixel space, i.e. black, as ``transforms.RandomCrop(32,
padding=4)`` pads the PIL image before ``Normalize``), take a random crop of the original size,
flip horizontally with probability 1/2. Offsets and flips are drawn on the CPU from ``generator``
(three draws per batch, in a fixed order), so a batch is a pure function of (indices, generator
state) on any device.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

PAD = 4  # pixels of zero padding before the random crop

# Per-channel mean / std of the training images in [0, 1], the values the community uses.
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "emnist": ((0.1751,), (0.3332,)),  # EMNIST balanced, the usual figures
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cinic10": ((0.47889522, 0.47227842, 0.43047404), (0.24205776, 0.23828046, 0.25874835)),
    # digits: computed from the bundled images at load time (see loaders._load_digits)
}


@dataclass(eq=False)
class ArrayDataset:
    """Images ``(N, C, H, W)`` uint8 (or float32, used as they are) and labels ``(N,)`` int64, with
    their normalisation; or token sequences ``(N, L)`` uint8 / int64 ids of a ``vocab``-word vocabulary
    (``mean`` and ``std`` then empty: ids are not normalised).

    Attributes: ``images`` (the samples, images or token ids), ``labels``, ``num_classes``,
    ``in_channels``, ``image_size``, ``name`` (e.g. ``"cifar10"``, ``"emnist-balanced"``), ``mean`` /
    ``std`` (per channel, for images scaled to [0, 1]), ``classes`` (class names, where the format has
    them), ``vocab`` (token sequences only), ``inputs`` (``"images"`` or ``"tokens"``).
    """

    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int
    name: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: list[str] = field(default_factory=list)
    vocab: int = 0  # token sequences: ids are 0..vocab-1; 0 for images

    def __post_init__(self) -> None:
        self._on_device: dict[str, ArrayDataset] = {}
        self._norm_on: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        if self.images.dim() == 2 and self.images.dtype in (torch.uint8, torch.int64):
            self._tokens()
            return
        if self.images.dtype not in (torch.uint8, torch.float32) or self.images.dim() != 4:
            raise ValueError(f"images must be a uint8 or float32 (N, C, H, W) tensor (or token ids: a uint8 or "
                             f"int64 (N, L) one), got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(f"labels must have shape ({self.images.shape[0]},), got {tuple(self.labels.shape)}")
        self.labels = self.labels.to(torch.int64)
        c = self.images.shape[1]
        if len(self.mean) != c or len(self.std) != c:
            raise ValueError(f"mean/std need {c} channel values, got {self.mean} / {self.std}")
        self._mean = torch.tensor(self.mean, dtype=torch.float32).view(1, c, 1, 1)
        self._std = torch.tensor(self.std, dtype=torch.float32).view(1, c, 1, 1)

    def _tokens(self) -> None:
        """The checks of a token-sequence dataset (the ids' range is its loader's to check, row by row)."""
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(f"labels must have shape ({self.images.shape[0]},), got {tuple(self.labels.shape)}")
        self.labels = self.labels.to(torch.int64)
        if self.vocab < 1 or self.mean or self.std:
            raise ValueError(f"token sequences need vocab >= 1 and no mean/std, got vocab={self.vocab}, "
                             f"mean={self.mean}, std={self.std}")

    @property
    def inputs(self) -> str:
        """``"images"`` (``(N, C, H, W)``) or ``"tokens"`` (``(N, L)`` ids): what a model must take."""
        return "tokens" if self.images.dim() == 2 else "images"

    @property
    def in_channels(self) -> int:
        """Images: the channels. Token sequences: the vocabulary (the channels of a one-hot token), what a
        model's embedding needs; both are what ``build_model`` takes as ``in_channels``."""
        return self.vocab if self.inputs == "tokens" else int(self.images.shape[1])

    @property
    def image_size(self) -> int:
        """Images: the side. Token sequences: the sequence length L (``build_model``'s ``image_size``)."""
        return int(self.images.shape[1] if self.inputs == "tokens" else self.images.shape[2])

    @property
    def device(self) -> torch.device:
        return self.images.device

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __repr__(self) -> str:
        return (f"ArrayDataset({self.name!r}, n={len(self)}, shape={tuple(self.images.shape[1:])}, "
                f"classes={self.num_classes}, device={self.device})")

    def to(self, device: str | torch.device) -> "ArrayDataset":
        """This dataset with its tensors on ``device``, made once and kept (e.g. the whole of
        CIFAR-10 on the GPU is 150 MB and saves a host-to-device copy per batch)."""
        device = torch.device(device)
        if device == self.device:
            return self
        key = str(device)
        if key not in self._on_device:
            self._on_device[key] = self.like(self.images.to(device), self.labels.to(device))
        return self._on_device[key]

    def like(self, images: torch.Tensor, labels: torch.Tensor) -> "ArrayDataset":
        """A plain ArrayDataset of these samples and labels with this one's classes, normalisation and
        vocabulary (some of its rows, say; writers are not kept)."""
        return ArrayDataset(images, labels, self.num_classes, self.name, self.mean, self.std, list(self.classes),
                            self.vocab)

    def take(self, rows) -> "ArrayDataset":
        """The rows ``rows`` (positions), in that order, as a plain ArrayDataset (a copy of those rows)."""
        where = torch.as_tensor(rows, dtype=torch.int64)
        return self.like(self.images.index_select(0, where), self.labels.index_select(0, where))

    def _norm(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = str(device)  # one copy of mean/std per device, not a host-to-device copy per batch
        if key not in self._norm_on:
            self._norm_on[key] = (self._mean.to(device), self._std.to(device))
        return self._norm_on[key]

    @staticmethod
    def augment_draws(n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
        """The random draws :meth:`batch` makes for ``n`` augmented images, in its order: row and
        column offsets, then flips. Drawn on the CPU, where the generator lives, so a batch is the
        same on any device; batched training draws per job and builds many jobs' batches at once."""
        dy = torch.randint(0, 2 * PAD + 1, (n,), generator=generator)
        dx = torch.randint(0, 2 * PAD + 1, (n,), generator=generator)
        flip = torch.rand(n, generator=generator) < 0.5
        return dy, dx, flip

    def batch(self, idx: torch.Tensor, *, augment: bool = False, generator: torch.Generator | None = None,
              device: str | torch.device = "cpu", draws: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(images, labels)`` for the rows ``idx``: float32 normalised images and int64 labels on
        ``device``. With ``augment``, random crop (4-pixel zero padding) and horizontal flip, drawn
        from ``generator`` (``None``: torch's global generator), or given as ``draws`` (from
        :meth:`augment_draws`). Token sequences: ``(int64 ids, labels)``; ``augment`` is refused."""
        device = torch.device(device)
        idx = torch.as_tensor(idx, dtype=torch.int64)
        if self.inputs == "tokens":
            if augment:
                raise ValueError(f"{self.name} holds token sequences: augmentation (crop and flip) is for images")
            x = self.images.index_select(0, idx.to(self.device)).to(device, non_blocking=True).to(torch.int64)
            return x, self.labels.index_select(0, idx.to(self.device)).to(device, non_blocking=True)
        if augment:
            dy, dx, flip = draws if draws is not None else self.augment_draws(idx.numel(), generator)
        src = self.images.index_select(0, idx.to(self.device)).to(device, non_blocking=True)
        x = src.to(torch.float32).div_(255.0) if src.dtype == torch.uint8 else src  # src is a fresh copy
        if augment:
            x = _crop_flip(x, dy.to(device), dx.to(device), flip.to(device))
        mean, std = self._norm(device)
        x = x.sub_(mean).div_(std)
        y = self.labels.index_select(0, idx.to(self.device)).to(device, non_blocking=True)
        return x, y


def _crop_flip(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Crop each padded image at (dy, dx) back to its size, mirrored where ``flip``; one gather."""
    n, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD))  # zeros = black before normalising
    ar_h = torch.arange(h, device=x.device)
    ar_w = torch.arange(w, device=x.device)
    rows = dy[:, None] + ar_h[None, :]  # (n, h)
    cols = dx[:, None] + torch.where(flip[:, None], (w - 1) - ar_w[None, :], ar_w[None, :])  # (n, w)
    b = torch.arange(n, device=x.device)[:, None, None, None]
    ch = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[b, ch, rows[:, None, :, None], cols[:, None, None, :]]


def save_cache(path: Path, **arrays: np.ndarray) -> None:
    """A loader's decoded cache (derived data), written whole then renamed, so ranks racing to write
    leave one whole file; a read-only data root just has no cache (no error)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npz")
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
