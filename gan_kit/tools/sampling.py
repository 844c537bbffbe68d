"""Latent walks: spherical interpolation between Gaussian latents and animated GIFs of them."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["slerp", "interpolate_latents", "save_gif"]


def slerp(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation between latents ``a`` and ``b`` ``[..., D]`` at ``t`` in [0, 1]
    (broadcast against the leading dims). Gaussian latents lie near a sphere, which linear
    interpolation leaves (White 2016, "Sampling Generative Networks", sec. 2.2)."""
    a_n, b_n = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    omega = torch.acos((a_n * b_n).sum(-1, keepdim=True).clamp(-1 + 1e-7, 1 - 1e-7))
    so = torch.sin(omega)
    return (torch.sin((1 - t) * omega) / so) * a + (torch.sin(t * omega) / so) * b


def interpolate_latents(pairs: torch.Tensor, steps: int) -> torch.Tensor:
    """``pairs[R, 2, D]`` -> ``[R, steps, D]``: each row walks from ``pairs[r, 0]`` to
    ``pairs[r, 1]`` (both included)."""
    t = torch.linspace(0, 1, steps).view(1, steps, 1)
    return slerp(pairs[:, :1], pairs[:, 1:], t)


def save_gif(frames: torch.Tensor, path: str | Path, ms_per_frame: int = 120) -> None:
    """An animated GIF of ``frames[R, T, C, H, W]`` in [-1, 1]: frame t shows the R walks' t-th
    images as a grid of ceil(sqrt(R)) a row (cells upscaled to at least 32 px; 64 walks make an
    8 x 8 grid, not a 64-image strip), walking forth and back."""
    import math

    import torchvision.utils as vutils
    from PIL import Image

    from gan_kit.tools.grids import MIN_CELL

    r, t = frames.shape[:2]
    size = max(frames.shape[-1], MIN_CELL)
    images = []
    for k in list(range(t)) + list(range(t - 2, 0, -1)):
        cells = torch.nn.functional.interpolate(frames[:, k].float(), size=size, mode="nearest")
        grid = vutils.make_grid(cells.clamp(-1, 1), nrow=math.ceil(math.sqrt(r)), normalize=True,
                                value_range=(-1, 1), padding=1)
        arr = (grid.mul(255).round().byte().permute(1, 2, 0).numpy())
        images.append(Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=ms_per_frame, loop=0)
