"""Sample grids: images in [-1, 1] written as one PNG, each cell upscaled (nearest) to at least
32 pixels a side so that small images and early phases stay visible."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = ["save_grid", "MIN_CELL"]

#: Smallest side of one grid cell in pixels.
MIN_CELL = 32


def save_grid(images: torch.Tensor, path: str | Path, *, size: int | None = None, nrow: int | None = None) -> None:
    """Write ``images[N,C,H,W]`` (values in [-1, 1]) to ``path`` as a grid, ``nrow`` images a row
    (default: a square), each upscaled to ``size`` (default: ``max(H, MIN_CELL)``) pixels."""
    import torchvision.utils as vutils

    images = images.detach().float().cpu()
    size = size or max(images.shape[-1], MIN_CELL)
    if images.shape[-1] != size:
        images = F.interpolate(images, size=size, mode="nearest")
    nrow = nrow or max(1, int(math.sqrt(images.shape[0])))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    vutils.save_image(images.clamp(-1, 1), path, nrow=nrow, normalize=True, value_range=(-1, 1), padding=1)
