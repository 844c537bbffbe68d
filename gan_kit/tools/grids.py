"""Sample grids: images in [-1, 1] written as one PNG, each cell upscaled (nearest) to at least
32 pixels a side so that small images and early phases stay visible; and ``to_uint8``, the one
mapping of those values to 8-bit pixels (the grids' and ``gankit generate``'s PNGs alike)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = ["save_grid", "to_uint8", "MIN_CELL"]

#: Smallest side of one grid cell in pixels.
MIN_CELL = 32


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """``images`` (any shape, values in about [-1, 1]) as uint8 pixels on the CPU: clamped to
    [-1, 1], mapped to [0, 255] and rounded half up - the arithmetic of torchvision's
    ``save_image(normalize=True, value_range=(-1, 1))``, so a grid's cell and a PNG of the same
    image hold the same pixels."""
    x = images.detach().float().cpu().clamp(-1, 1)
    return x.sub(-1).div(2).mul(255).add(0.5).clamp(0, 255).to(torch.uint8)


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
