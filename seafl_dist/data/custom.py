"""A dataset or a partition named by import path (``data.name: mydata:load``), loaded and checked.

Dataset: ``f(root, train)`` with ``root`` = ``data.root`` (a string) returns either a map-style
Dataset whose items are ``(image, label)`` (image a tensor or array of shape (C, H, W) or
(H, W); label an int) or a pair ``(images, labels)`` of tensors/arrays ((N, C, H, W) or
(N, H, W); (N,)). It is held in memory like the built-in sets, as one tensor: uint8 images stay
uint8 and are scaled to [0, 1] per batch, floating-point images are used as they are (no
normalisation is applied to either: do your own in ``f`` or in the model). Images must be
square and all of one shape. The number of classes is ``len(ds.classes)`` when the dataset has
a ``classes`` list (torchvision's convention), else the training split's largest label + 1;
labels outside [0, classes) are refused with the first bad index, as are mixed shapes.

Partition: ``f(labels, num_devices, seed)`` (labels a numpy int64 array of the training split)
returns ``num_devices`` index arrays. None may be empty or hold an index outside the dataset,
and no index may be in two shards unless ``data.shards_overlap`` is true.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import torch

from ..settings.plugins import plugin_error, resolve
from .dataset import ArrayDataset


def load_custom_dataset(path: str, root: Path, train: bool, num_classes: int | None = None) -> ArrayDataset:
    """The split ``train`` of the dataset ``path`` names; ``num_classes`` (the training split's, for
    the test split) bounds the labels."""
    made = resolve("data.name", path)(str(root), train)
    split = "train" if train else "test"
    if isinstance(made, (tuple, list)) and len(made) == 2 and all(_is_array(m) for m in made):
        images, labels = _as_tensor(made[0]), _as_tensor(made[1])
        if labels.dim() != 1 or len(labels) != len(images):
            raise plugin_error("data.name", path, f"its {split} split has {len(images)} images but labels of shape "
                                                  f"{tuple(labels.shape)}; expected ({len(images)},)")
        images = _with_channels(path, split, images, batched=True)
        _check_labels(path, split, labels)
    elif hasattr(made, "__getitem__") and hasattr(made, "__len__"):
        images, labels = _stack_items(path, split, made)
    else:
        raise plugin_error("data.name", path, f"it returned {type(made).__name__} for the {split} split")
    if len(images) == 0:
        raise plugin_error("data.name", path, f"its {split} split is empty")
    if images.shape[2] != images.shape[3]:
        raise plugin_error("data.name", path, f"its images are {images.shape[3]}x{images.shape[2]}; models here "
                                              "take square images (pad or crop them in the loader)")
    if images.dtype != torch.uint8:
        if not images.is_floating_point():
            raise plugin_error("data.name", path, f"its images are {images.dtype}; use uint8 (0..255) or floats")
        images = images.to(torch.float32)
    classes = list(getattr(made, "classes", None) or [])
    if num_classes is None:
        num_classes = len(classes) if classes else int(labels.max()) + 1
    bad = torch.nonzero(labels >= num_classes).flatten()
    if len(bad):
        i = int(bad[0])
        raise plugin_error("data.name", path, f"item {i} of its {split} split has label {int(labels[i])}, "
                                              f"outside the {num_classes} classes [0, {num_classes})")
    c = images.shape[1]
    return ArrayDataset(images.contiguous(), labels.to(torch.int64), num_classes, path, (0.0,) * c, (1.0,) * c,
                        [str(x) for x in classes] or [str(k) for k in range(num_classes)])


def _is_array(x) -> bool:
    return isinstance(x, (torch.Tensor, np.ndarray))


def _as_tensor(x) -> torch.Tensor:
    return x.detach().cpu() if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))


def _with_channels(path: str, split: str, images: torch.Tensor, *, batched: bool) -> torch.Tensor:
    want = 4 if batched else 3
    if images.dim() == want - 1:
        images = images.unsqueeze(1 if batched else 0)
    if images.dim() != want:
        what = "images" if batched else "an image"
        raise plugin_error("data.name", path, f"its {split} split gives {what} of shape {tuple(images.shape)}; "
                                              f"expected {'(N, C, H, W) or (N, H, W)' if batched else '(C, H, W) or (H, W)'}")
    return images


def _check_labels(path: str, split: str, labels: torch.Tensor) -> None:
    if labels.is_floating_point() or labels.dtype == torch.bool or labels.is_complex():
        raise plugin_error("data.name", path, f"its {split} labels are {labels.dtype}; expected integers")
    bad = torch.nonzero(labels < 0).flatten()
    if len(bad):
        i = int(bad[0])
        raise plugin_error("data.name", path, f"item {i} of its {split} split has label {int(labels[i])} < 0")


def _stack_items(path: str, split: str, ds) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (image, label) item as one images tensor and one labels tensor; the first odd item is named."""
    images, labels, shape, dtype = [], [], None, None
    for i in range(len(ds)):
        item = ds[i]
        if not isinstance(item, (tuple, list)) or len(item) < 2 or not _is_array(item[0]):
            raise plugin_error("data.name", path, f"item {i} of its {split} split is {type(item).__name__}; "
                                                  "expected a pair (image tensor, int label)")
        image = _with_channels(path, split, _as_tensor(item[0]), batched=False)
        if shape is None:
            shape, dtype = tuple(image.shape), image.dtype
        elif tuple(image.shape) != shape or image.dtype != dtype:
            raise plugin_error("data.name", path, f"item {i} of its {split} split is an image of shape "
                                                  f"{tuple(image.shape)} {image.dtype}, item 0 one of {shape} {dtype}")
        label = item[1]
        if isinstance(label, (torch.Tensor, np.ndarray)) and label.ndim == 0:
            label = label.item()  # a 0-d tensor or array: its Python number
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or label < 0:
            raise plugin_error("data.name", path, f"item {i} of its {split} split has label {label!r}; "
                                                  "expected an int >= 0")
        images.append(image)
        labels.append(int(label))
    if not images:
        raise plugin_error("data.name", path, f"its {split} split is empty")
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64)


def custom_partition(path: str, labels: np.ndarray, num_devices: int, seed: int, *,
                     overlap: bool = False) -> list[np.ndarray]:
    """The shards ``path``'s function gives, checked (see the module doc); a bad one is refused in one line
    naming the function's file and the first bad shard and index."""
    fn = resolve("data.partition", path)
    shards = fn(labels, num_devices, seed)

    def refuse(problem: str):
        return plugin_error("data.partition", path, f"{problem}, in what {_source(fn)} returned")

    try:
        shards = list(shards)
    except TypeError:
        raise refuse(f"it returned {type(shards).__name__}, not a list") from None
    if len(shards) != num_devices:
        raise refuse(f"it returned {len(shards)} shards for devices.num={num_devices}")
    total, out, owner = len(labels), [], np.full(len(labels), -1, dtype=np.int64)
    for k, s in enumerate(shards):
        a = np.asarray(s.cpu() if isinstance(s, torch.Tensor) else s)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise refuse(f"shard {k} is {a.dtype} of shape {a.shape}, not a 1-D array of integer indices")
        if a.size == 0:
            raise refuse(f"shard {k} is empty (every device needs a sample)")
        outside = a[(a < 0) | (a >= total)]
        if outside.size:
            raise refuse(f"shard {k} holds index {int(outside[0])}, outside the {total} training samples")
        a = a.astype(np.int64)
        if not overlap:
            uniq, counts = np.unique(a, return_counts=True)
            if (counts > 1).any():
                raise refuse(f"shard {k} holds index {int(uniq[counts > 1][0])} twice "
                             "(set data.shards_overlap=true if that is meant)")
            taken = owner[a] >= 0
            if taken.any():
                i = int(a[taken][0])
                raise refuse(f"index {i} is in shards {int(owner[i])} and {k} "
                             "(set data.shards_overlap=true if that is meant)")
            owner[a] = k
        out.append(a)
    return out


def _source(fn) -> str:
    """Where a user's function lives: its file, so the mistake can be found."""
    try:
        return f"{getattr(fn, '__qualname__', fn)} in {inspect.getsourcefile(fn)}"
    except TypeError:  # a builtin or a C function: no file to name
        return repr(fn)
