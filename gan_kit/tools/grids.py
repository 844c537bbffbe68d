"""Sample grids: images in [-1, 1] written as one PNG, each cell upscaled (nearest) to at least
32 pixels a side so that small images and early phases stay visible; one image as it is
(``save_image``: lossless, no upscaling); and ``to_uint8``, the one mapping of those values to
8-bit pixels (the grids' and ``gankit generate``'s PNGs alike)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from gan_kit.base.atomic import replace_with, temporary_sibling

__all__ = ["save_grid", "save_image", "grid_frame", "to_uint8", "MIN_CELL"]

#: Smallest side of one grid cell in pixels.
MIN_CELL = 32


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """``images`` (any shape, values in about [-1, 1]) as uint8 pixels on the CPU: clamped to
    [-1, 1], mapped to [0, 255] and rounded half up - the arithmetic of torchvision's
    ``save_image(normalize=True, value_range=(-1, 1))``, so a grid's cell and a PNG of the same
    image hold the same pixels."""
    x = images.detach().float().cpu().clamp(-1, 1)
    return x.sub(-1).div(2).mul(255).add(0.5).clamp(0, 255).to(torch.uint8)


#: PIL's mode for an image of 1 to 4 channels (gray, gray + alpha, RGB, RGBA).
MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def save_image(image: torch.Tensor, path: str | Path) -> Path:
    """Write ``image[C, H, W]`` (values in [-1, 1]) to ``path`` pixel for pixel (no upscaling;
    a .png is lossless), in mode L for 1 channel and RGB for 3 (LA, RGBA for 2, 4); the folder is
    created. Returns the path. Raises ValueError for another shape or channel count."""
    from PIL import Image

    if image.dim() != 3 or image.shape[0] not in MODES:
        raise ValueError(f"save_image: expected image[C, H, W] with 1 to 4 channels, got {list(image.shape)}")
    pixels = to_uint8(image).permute(1, 2, 0).numpy()
    # PIL reads the mode from the array: [H, W] uint8 is L, [H, W, 2 | 3 | 4] is LA, RGB, RGBA
    picture = Image.fromarray(pixels[..., 0] if image.shape[0] == 1 else pixels)
    return _written(path, picture.save)


def save_grid(images: torch.Tensor, path: str | Path, *, size: int | None = None, nrow: int | None = None) -> None:
    """Write ``images[N,C,H,W]`` (values in [-1, 1]) to ``path`` as a grid, ``nrow`` images a row
    (default: a square), each upscaled to ``size`` (default: ``max(H, MIN_CELL)``) pixels."""
    import torchvision.utils as vutils

    images = images.detach().float().cpu()
    size = size or max(images.shape[-1], MIN_CELL)
    if images.shape[-1] != size:
        images = F.interpolate(images, size=size, mode="nearest")
    nrow = nrow or max(1, int(math.sqrt(images.shape[0])))
    _written(path, lambda tmp: vutils.save_image(images.clamp(-1, 1), tmp, nrow=nrow, normalize=True,
                                                 value_range=(-1, 1), padding=1))


def _written(path: str | Path, write) -> Path:
    """``write(tmp)`` into a hidden file beside ``path`` (same suffix, so the format follows the
    name), renamed over ``path`` when complete: a run's grids, rewritten every tick, and every
    command's pictures are the previous file or the whole new one, never a truncated PNG (an
    interrupted or failed write removes the temporary file). The folder is created."""
    tmp = temporary_sibling(path)
    try:
        write(tmp)
        return replace_with(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def grid_frame(images: torch.Tensor) -> torch.Tensor:
    """One animation frame: ``images[R,C,H,W]`` (values in [-1, 1]) laid out as a grid of
    ceil(sqrt(R)) a row (64 walks make an 8 x 8 grid, not a 64-image strip), each cell upscaled
    (nearest) to ``max(H, MIN_CELL)`` pixels, with the 1-pixel black padding of ``save_grid``.
    Returns ``uint8 [H', W', C]`` on the CPU (H' = rows * (cell + 1) + 1), what GIF and MP4
    writers take."""
    import torchvision.utils as vutils

    images = images.detach().float().cpu()
    size = max(images.shape[-1], MIN_CELL)
    if images.shape[-1] != size:
        images = F.interpolate(images, size=size, mode="nearest")
    grid = vutils.make_grid(images.clamp(-1, 1), nrow=math.ceil(math.sqrt(images.shape[0])), normalize=True,
                            value_range=(-1, 1), padding=1)
    if images.shape[1] == 1:
        grid = grid[:1]  # make_grid repeats one channel to three
    return grid.mul(255).add(0.5).clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()  # as to_uint8
