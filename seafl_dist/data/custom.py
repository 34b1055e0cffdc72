"""A dataset or a partition named by import path (``data.name: mydata:load``), loaded and checked.

Dataset: ``f(root, train)`` with ``root`` = ``data.root`` (a string) returns a map-style Dataset or a pair
``(inputs, labels)`` of tensors/arrays (labels of shape (N,), integers >= 0). What it holds decides how it is
held:

- **Images** (the fast path): items ``(image, int label)`` with the image a square uint8 or floating-point
  tensor or array of shape (C, H, W) or (H, W), or a pair of (N, C, H, W) or (N, H, W) of them. Held in
  memory like the built-in sets, as one tensor: uint8 images stay uint8 and are scaled to [0, 1] per batch,
  floating-point images are used as they are (no normalisation is applied to either: do your own in ``f`` or
  in the model). All must be of one shape and dtype; the first that differs is refused in one line.
- **Any other samples** (token ids, features, tuples, dicts, images of several sizes), or a dataset with a
  ``collate_fn`` attribute: held as a LightningDataModule's samples are (data/samples.py): batches are
  ``collate_fn`` (else torch's ``default_collate``) of the rows, labels are those declared (a ``labels`` or
  ``targets`` attribute) or read from ``(x, int label)`` samples, ``data.partition_by`` reads a key of the
  samples, and a model is the user's own (``model.name: pkg.module:fn``). The first two samples are batched at
  load: samples the collate cannot batch are refused in one line. An IterableDataset is refused.

The number of classes is ``len(ds.classes)`` when the dataset has a ``classes`` list (torchvision's
convention), else the training split's largest label + 1; test labels outside [0, classes) are refused with
the first bad index and what to change (one refusal, refuse_outside, for images and other samples alike).

Partition: ``f(labels, num_devices, seed)`` (labels a numpy int64 array of the training split)
returns ``num_devices`` index arrays. None may be empty or hold an index outside the dataset,
and no index may be in two shards unless ``data.shards_overlap`` is true.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import torch

from torch.utils.data import IterableDataset

from ..settings.plugins import plugin_error, resolve

from .dataset import ArrayDataset
from .samples import SampleDataset, sample_dataset


def load_custom_dataset(path: str, root: Path, train: bool,
                        num_classes: int | None = None) -> ArrayDataset | SampleDataset:
    """The split ``train`` of the dataset ``path`` names; ``num_classes`` (the training split's, for
    the test split) bounds the labels."""
    made = resolve("data.name", path)(str(root), train)
    split = "train" if train else "test"
    if isinstance(made, (tuple, list)) and len(made) == 2 and all(_is_array(m) for m in made):
        images, labels = _as_tensor(made[0]), _as_tensor(made[1])
        if labels.dim() != 1 or len(labels) != len(images):
            raise plugin_error("data.name", path, f"its {split} split has {len(images)} rows but labels of shape "
                                                  f"{tuple(labels.shape)}; expected ({len(images)},)")
        _check_labels(path, split, labels)
        if not _image_like(images, batched=True):  # tokens, features, ...: rows of any shape, batched by stacking
            from torch.utils.data import TensorDataset
            return any_samples(path, split, TensorDataset(images, labels.to(torch.int64)), num_classes)
        images = _with_channels(path, split, images, batched=True)
    elif isinstance(made, IterableDataset):
        raise plugin_error("data.name", path, f"its {split} split is an IterableDataset ({type(made).__name__}): "
                                              "devices take samples by index, and a stream cannot be shared out; "
                                              "return a map-style Dataset of its samples")
    elif hasattr(made, "__getitem__") and hasattr(made, "__len__"):
        if len(made) == 0:
            raise plugin_error("data.name", path, f"its {split} split is empty")
        first = made[0]
        if getattr(made, "collate_fn", None) is not None or not (
                isinstance(first, (tuple, list)) and len(first) == 2 and _is_array(first[0])
                and _image_like(_as_tensor(first[0]), batched=False)):
            return any_samples(path, split, made, num_classes)
        images, labels = _stack_items(path, split, made)
    else:
        raise plugin_error("data.name", path, f"it returned {type(made).__name__} for the {split} split")
    classes = list(getattr(made, "classes", None) or [])
    return held_images(path, split, images, labels, classes, num_classes,
                       lambda problem: plugin_error("data.name", path, problem))


def held_images(name: str, split: str, images: torch.Tensor, labels: torch.Tensor, classes: list,
                num_classes: int | None, refuse) -> ArrayDataset:
    """Images (N, C, H, W) and labels (N,) as one ArrayDataset named ``name`` (the fast path; module doc), the
    classes ``len(classes)`` or given or the largest label + 1; ``refuse(problem)`` makes the one-line error."""
    if len(images) == 0:
        raise refuse(f"its {split} split is empty")
    if images.dtype != torch.uint8:
        images = images.to(torch.float32)
    if num_classes is None:
        num_classes = len(classes) if classes else int(labels.max()) + 1
    refuse_outside(refuse, split, labels, num_classes)
    c = images.shape[1]
    return ArrayDataset(images.contiguous(), labels.to(torch.int64), num_classes, name, (0.0,) * c, (1.0,) * c,
                        [str(x) for x in classes] or [str(k) for k in range(num_classes)])


def refuse_outside(refuse, split: str, labels: torch.Tensor, num_classes: int) -> None:
    """``refuse`` the first label of ``split`` outside [0, num_classes), if any: the training split's classes (for
    the test split), or those its classes list names (the training split's own)."""
    bad = torch.nonzero(labels >= num_classes).flatten()
    if len(bad):
        i = int(bad[0])
        whose, fix = (("its classes list names", "name every class in it") if split == "train" else
                      ("of the training split", f"give the {split} split only those labels, or both splits a "
                                                "classes list that names every class"))
        raise refuse(f"item {i} of its {split} split has label {int(labels[i])}, outside the {num_classes} classes "
                     f"[0, {num_classes}) {whose}; {fix}")


def _image_like(x: torch.Tensor, *, batched: bool) -> bool:
    """Whether ``x`` is an image ((C, H, W) or (H, W), square, uint8 or floating point) or a batch of them:
    what the fast path holds as one tensor."""
    dims = (3, 4) if batched else (2, 3)
    return x.dim() in dims and x.shape[-1] == x.shape[-2] and (x.dtype == torch.uint8 or x.is_floating_point())


def any_samples(path: str, split: str, ds, num_classes: int | None, refuse=None) -> SampleDataset:
    """A map-style dataset of samples of any structure (not images) as a DataModule's samples are held
    (data/samples.py): batched by its ``collate_fn`` attribute, else torch's ``default_collate``, which the
    first two samples are checked against; labels where declared or read from ``(x, int label)`` pairs."""
    from torch.utils.data.dataloader import default_collate
    refuse = refuse or (lambda problem: plugin_error("data.name", path, problem))
    collate = getattr(ds, "collate_fn", None) or default_collate
    if len(ds) == 0:
        raise refuse(f"its {split} split is empty")
    try:
        collate([ds[i] for i in range(min(2, len(ds)))])
    except Exception as err:  # noqa: BLE001 -- the user's samples or collate, said in one line
        said = (str(err).strip().splitlines() or [""])[0][:200]
        how = "its collate_fn" if getattr(ds, "collate_fn", None) else "torch's default_collate"
        raise refuse(f"its {split} split's samples 0 and 1 cannot be batched by {how} ({type(err).__name__}: "
                     f"{said}); give the dataset a collate_fn attribute that batches a list of its samples") from None
    classes = list(getattr(ds, "classes", None) or [])
    data = sample_dataset(ds, collate, path, num_classes=num_classes if num_classes is not None else
                          (len(classes) or None))
    if data.labels is not None and num_classes is not None and len(data.labels):
        refuse_outside(refuse, split, data.labels, num_classes)
    if classes and len(classes) == data.num_classes:
        data.classes = [str(c) for c in classes]
    return data


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
                                                  f"{tuple(image.shape)} {image.dtype}, item 0 one of {shape} {dtype}; "
                                                  "make them one shape, or give the dataset a collate_fn attribute "
                                                  "that batches them")
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
