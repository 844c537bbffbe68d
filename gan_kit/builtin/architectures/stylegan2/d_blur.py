"""The blur of every image D sees, fading out early in training (StyleGAN3, Karras et al. 2021,
arXiv:2106.12423, sec. 3.2 / appendix D: StyleGAN3-R blurs D's inputs with a Gaussian of
sigma = 10 px at the start, fading linearly to none over the first 200k images at a batch of 32,
so D first compares the coarse structure; the StyleGAN3 repository's ``training/loss.py`` applies
it to reals and fakes alike, before any augmentation).

The filter is the paper's code's, written from its definition: ``k = floor(3 sigma)`` taps each
side of the centre, tap ``i`` in [-k, k] is ``2 ** -(i / sigma) ** 2`` (a Gaussian of standard
deviation ``sigma / sqrt(2 ln 2)`` ~ 0.85 sigma, not sigma), the taps normalised to sum 1, applied
separably along the width then the height with ``k`` zero pixels padded on each side (the output
keeps its size). No blur when ``k`` is 0 (sigma < 1/3). The fade itself is a schedule of the
option that sets sigma (``architecture.d_blur_sigma = { schedule = "linear", start = 10, end = 0,
kimg = 200 }`` gives ``max(1 - nimg / 200e3, 0) * 10``, the paper's code's formula).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["blur_taps", "blur_images"]


def blur_taps(sigma: float, device: torch.device | str | None = None) -> torch.Tensor | None:
    """The 1-D filter ``[2k + 1]`` (float32, sums to 1) for ``sigma`` pixels, ``k = floor(3
    sigma)``; None when ``k`` is 0 (no blur). ValueError for a negative or non-finite sigma."""
    sigma = float(sigma)
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"blur_taps: sigma must be a finite number >= 0, got {sigma}")
    k = math.floor(sigma * 3)
    if k <= 0:
        return None
    f = torch.arange(-k, k + 1, dtype=torch.float32, device=device).div(sigma).square().neg().exp2()
    return f / f.sum()


def blur_images(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """``images[N, C, H, W]`` blurred by ``blur_taps(sigma)`` (same shape and dtype; computed in
    float32 outside autocast); the images themselves when the filter is empty."""
    f = blur_taps(sigma, images.device)
    if f is None:
        return images
    k = (f.numel() - 1) // 2
    c = images.shape[1]
    with torch.autocast(images.device.type, enabled=False):
        x = F.pad(images.float(), (k, k, k, k))
        x = F.conv2d(x, f.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)  # along the width
        x = F.conv2d(x, f.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)  # along the height
    return x.to(images.dtype)
