"""The image datasets behind every built-in data set - in memory (float or uint8), decoded from
files on access, optionally labelled, optionally doubled with mirrored copies - and the collation
of their items into batches. ``gan_kit.training.data`` states the dataset contract."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from gan_kit.base.errors import GankitError
from gan_kit.training.imageio import DECODE_ERRORS, DEFAULT_FRAMING, BoxFn, Framing, load_image, reason

__all__ = ["check_labels", "ImageDataset", "TensorImages", "UInt8Images", "FileImages", "XFlip", "mirrored",
           "collate_images", "collate_images_labels", "to_float_images", "has_uint8_batches"]

log = logging.getLogger("gankit.data")


# ------------------------------------------------------------------------------ datasets --


def check_labels(labels: torch.Tensor | None, n: int, num_classes: int) -> torch.Tensor | None:
    """``labels`` as a contiguous ``int64 [n]`` tensor of values in ``[0, num_classes)``, or None.

    Raises ValueError (a factory's bug, not a user error) for another shape or a value out of range.
    """
    if labels is None:
        if num_classes:
            raise ValueError(f"num_classes = {num_classes} given without labels")
        return None
    labels = torch.as_tensor(labels).to(torch.int64).contiguous()
    if labels.shape != (n,):
        raise ValueError(f"expected labels of shape ({n},), got {tuple(labels.shape)}")
    if n and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{int(labels.min())}, {int(labels.max())}]")
    return labels


class ImageDataset(Dataset):
    """Base of the built-in datasets: ``labels`` / ``num_classes`` and the item type above."""

    labels: torch.Tensor | None = None
    num_classes: int = 0
    #: Whether fetching an item reads and decodes a file (worth loader worker processes) rather
    #: than indexing memory (where a worker only adds the copy through shared memory).
    decodes_per_item: bool = False

    def _set_labels(self, labels, num_classes: int) -> None:
        self.labels = check_labels(labels, len(self), num_classes)
        self.num_classes = int(num_classes) if self.labels is not None else 0

    def _item(self, image: torch.Tensor, i: int):
        return image if self.labels is None else (image, self.labels[i].clone())

    def _batch(self, images: torch.Tensor, idx: torch.Tensor):
        return images if self.labels is None else (images, self.labels[idx])


def _to_float(x: torch.Tensor) -> torch.Tensor:
    """``uint8`` images -> float in [-1, 1]."""
    return x.float().div_(127.5).sub_(1.0)


def to_float_images(x: torch.Tensor) -> torch.Tensor:
    """Images as the networks take them: ``uint8 [N, C, H, W]`` (0..255) -> float32 in [-1, 1]
    (``x / 127.5 - 1``, the same operations, so the same values, as a dataset's float items), on
    ``x``'s device; float images are returned as they are. The training loop calls it after the
    copy to the device, so the CPU never converts (or holds) float batches (stylegan2-ada-pytorch's
    training loop does the same: ``phase_real_img.to(device).to(torch.float32) / 127.5 - 1``)."""
    return _to_float(x) if x.dtype == torch.uint8 else x


def has_uint8_batches(dataset: Dataset) -> bool:
    """Whether ``dataset`` can give its batches as ``uint8`` (``uint8_items(indices)``): the
    in-memory uint8 and on-disk sets, and their mirrored doubles; not float sets (``TensorImages``,
    a plugin's own dataset without the method)."""
    if isinstance(dataset, XFlip):
        return has_uint8_batches(dataset.base)
    return callable(getattr(dataset, "uint8_items", None))


class TensorImages(ImageDataset):
    """In-memory float images ``[N, C, H, W]`` in [-1, 1], optionally with ``labels [N]``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor | None = None, num_classes: int = 0):
        self.images = images.contiguous()
        self._set_labels(labels, num_classes)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int):
        return self._item(self.images[i], i)

    def __getitems__(self, indices: list[int]):
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self._batch(self.images[idx], idx)


class UInt8Images(ImageDataset):
    """In-memory ``uint8 [N, C, H, W]`` images served as float in [-1, 1] (a quarter of the memory
    of float images), optionally with ``labels [N]``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor | None = None, num_classes: int = 0):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"expected uint8 [N,C,H,W] images, got {images.dtype} {tuple(images.shape)}")
        self.images = images.contiguous()
        self._set_labels(labels, num_classes)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int):
        return self._item(_to_float(self.images[i]), i)

    def __getitems__(self, indices: list[int]):
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self._batch(_to_float(self.images[idx]), idx)

    def uint8_items(self, indices: list[int]):
        """``__getitems__`` without the float conversion: ``uint8 [N, C, H, W]`` images (or
        ``(images, labels)``), a quarter of the bytes to copy to the device."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self._batch(self.images[idx], idx)


class FileImages(ImageDataset):
    """Images decoded from files on every access (``gan_kit.training.imageio.load_image``), for folders too
    large to hold in memory; optionally with ``labels [N]`` (one per file).

    ``channels``: 1, 3, or 4 (RGBA, alpha kept); ``framing``: crop or pad, and the colours
    (``gan_kit.training.imageio.Framing``). A file that fails to decode is, with ``on_corrupt="skip"``,
    replaced by the next readable
    file (deterministically; its label comes with it) and reported once by name; with ``"error"``
    it raises GankitError naming ``key`` and the file.
    """

    def __init__(self, files: Sequence[Path], resolution: int, channels: int, on_corrupt: str = "skip",
                 box_fn: BoxFn | None = None, key: str = "data.path", labels: torch.Tensor | None = None,
                 num_classes: int = 0, framing: Framing = DEFAULT_FRAMING):
        self.files = list(files)
        self.resolution, self.channels, self.on_corrupt = resolution, channels, on_corrupt
        self.framing = framing
        self.box_fn, self.key = box_fn, key
        self.bad: set[int] = set()
        self._set_labels(labels, num_classes)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        image, j = self._fetch(i)
        return self._item(_to_float(image), j)

    def uint8_items(self, indices: list[int]):
        """Items ``indices`` decoded, as ``uint8 [N, C, H, W]`` (or ``(images, labels)``): what
        a loader worker sends to the main process (a quarter of float32's bytes)."""
        fetched = [self._fetch(i) for i in indices]
        images = torch.stack([image for image, _ in fetched])
        return self._batch(images, torch.as_tensor([j for _, j in fetched], dtype=torch.long))

    def _fetch(self, i: int) -> tuple[torch.Tensor, int]:
        """``(uint8 image, index of the file it came from)`` of item ``i`` (see the class doc)."""
        n = len(self.files)
        for k in range(n):
            j = (i + k) % n
            if j in self.bad:
                continue
            try:
                image = self._load(j)
            except DECODE_ERRORS as e:
                if self.on_corrupt == "error":
                    raise GankitError(f"{self.key}: cannot read image {self._describe(j)} ({reason(e)}); "
                                      f"{self.remedy} or set on_corrupt = \"skip\"") from None
                self.bad.add(j)
                log.warning("warning: %s: skipped unreadable image %s (%s)", self.key, self._describe(j), reason(e))
                continue
            return image, j
        raise GankitError(f"{self.key}: none of the {n} image files could be read")

    remedy = "remove the file"  # the first half of a corrupt file's fix in the one-line error
    decodes_per_item = True

    def _load(self, j: int, facts: dict | None = None) -> torch.Tensor:
        """File ``j`` as ``uint8 [C, res, res]`` (``load_image``; ``facts`` filled as there);
        raises one of DECODE_ERRORS."""
        return load_image(self.files[j], self.resolution, self.channels, self.box_fn, framing=self.framing,
                          facts=facts)

    def _describe(self, j: int) -> str:  # item j's file as messages name it
        return str(self.files[j])


def _split(item) -> tuple[torch.Tensor, torch.Tensor | None]:
    return (item[0], item[1]) if isinstance(item, (tuple, list)) else (item, None)


class XFlip(Dataset):
    """``base`` followed by its mirror image: ``2 N`` items, item ``i >= N`` is item ``i - N``
    flipped left-right (along W), with the same label. Deterministic: it doubles the data set
    rather than flipping at random (stylegan2-ada-pytorch's ``--mirror``; Karras et al. 2020,
    "Training Generative Adversarial Networks with Limited Data", sec. 4: x-flips of the data set
    are a non-leaking augmentation). Other attributes (``files``, ``classes``, ...) are ``base``'s.
    """

    def __init__(self, base: Dataset):
        self.base = base
        self.n = len(base)
        self.num_classes = int(getattr(base, "num_classes", 0))
        labels = getattr(base, "labels", None)
        self.labels = None if labels is None else torch.cat([labels, labels])

    def __getattr__(self, name: str) -> Any:
        if name == "base" or name.startswith("__"):  # unpickling asks before base is set
            raise AttributeError(name)
        return getattr(self.base, name)

    def __len__(self) -> int:
        return 2 * self.n

    def __getitem__(self, i: int):
        if not -2 * self.n <= i < 2 * self.n:
            raise IndexError(f"index {i} out of range for {2 * self.n} items")
        i %= 2 * self.n
        item = self.base[i % self.n]
        if i < self.n:
            return item
        image, label = _split(item)
        return image.flip(-1) if label is None else (image.flip(-1), label)

    def __getitems__(self, indices: list[int]):
        idx = torch.as_tensor(indices, dtype=torch.long) % (2 * self.n)
        src = (idx % self.n).tolist()
        if hasattr(self.base, "__getitems__"):
            images, labels = _split(self.base.__getitems__(src))
        else:
            images, labels = collate_images_labels([self.base[j] for j in src])
        return self._flip(idx, images, labels)

    def uint8_items(self, indices: list[int]):
        """``__getitems__`` of the base's ``uint8_items``: uint8 images, mirrored the same way.
        Raises AttributeError when the base has none (``has_uint8_batches`` tells)."""
        idx = torch.as_tensor(indices, dtype=torch.long) % (2 * self.n)
        images, labels = _split(self.base.uint8_items((idx % self.n).tolist()))
        return self._flip(idx, images, labels)

    def _flip(self, idx: torch.Tensor, images: torch.Tensor, labels: torch.Tensor | None):
        flipped = (idx >= self.n).view(-1, *([1] * (images.ndim - 1)))
        images = torch.where(flipped, images.flip(-1), images)
        return images if labels is None else (images, labels)


def mirrored(dataset: Dataset, xflip: bool) -> Dataset:
    """``XFlip(dataset)`` when ``xflip``, else ``dataset`` itself."""
    return XFlip(dataset) if xflip else dataset


# ----------------------------------------------------------------------------- collation --


def collate_images(batch) -> torch.Tensor:
    """Images ``[N, C, H, W]`` of a batch: ``batch`` is what a dataset's ``__getitems__`` gave
    (images, or ``(images, labels)``) or a list of items (images or ``(image, label)``);
    labels are dropped."""
    return collate_images_labels(batch)[0]


def collate_images_labels(batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(images [N, C, H, W], labels int64 [N] or None)`` of a batch (see ``collate_images``);
    labels is None for an unlabelled set."""
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, tuple) and len(batch) == 2 and isinstance(batch[0], torch.Tensor) and batch[0].ndim == 4:
        return batch[0], batch[1]  # a labelled __getitems__ batch
    pairs = [_split(b) for b in batch]
    images = torch.stack([p[0] for p in pairs])
    if any(p[1] is None for p in pairs):
        return images, None
    return images, torch.stack([torch.as_tensor(p[1], dtype=torch.int64) for p in pairs])
