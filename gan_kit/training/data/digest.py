"""A content digest of the images a run trains on, saved in its checkpoints, so a resumed run may
read its data from another path (``gankit run --resume DIR --set data.path=NEW``: a run moved to
another machine) exactly when the data there is the same - as the metric cache keys real
features by the exact images (``gan_kit.builtin.metrics.feature_extractors``)."""

from __future__ import annotations

import hashlib
from typing import Any

import torch

__all__ = ["data_digest"]


def _base(dataset: Any) -> Any:
    # A mirrored set (XFlip) is its base followed by the flips: the base decides the content.
    while hasattr(dataset, "base"):
        dataset = dataset.base
    return dataset


def data_digest(dataset: Any) -> str | None:
    """SHA-256 (hex) of ``dataset``'s images (their dtype, shape and bytes, in order) and its
    labels, for a data set held in memory (``images`` a tensor: every built-in set but one read
    lazily with ``cache = "none"``); None for a lazily read set, whose content gankit does not
    read whole. One pass over the bytes (about 1 s per GB)."""
    base = _base(dataset)
    images = getattr(base, "images", None)
    if not isinstance(images, torch.Tensor):
        return None
    h = hashlib.sha256(f"{images.dtype} {tuple(images.shape)}".encode())
    flat = images.detach().cpu().contiguous().reshape(-1)
    step = 1 << 26  # in chunks: no second copy of a large set
    for i in range(0, flat.numel(), step):
        h.update(flat[i:i + step].view(torch.uint8).numpy().data if flat.dtype != torch.uint8
                 else flat[i:i + step].numpy().data)
    labels = getattr(base, "labels", None)
    if isinstance(labels, torch.Tensor):
        h.update(b"labels")
        h.update(labels.detach().cpu().to(torch.int64).contiguous().numpy().data)
    return h.hexdigest()
