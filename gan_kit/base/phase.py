"""Growth phases and the fade-in of real images (Karras et al. 2018, "Progressive Growing of
GANs", section 2 and appendix A.1)."""

from __future__ import annotations

import math

import attrs
import torch
import torch.nn.functional as F


@attrs.frozen
class Phase:
    """Where training stands at some image count.

    index:      0-based phase number (one per resolution for progressive growth).
    resolution: image side in pixels the networks work at now.
    alpha:      fade-in weight of the newest block, in [0, 1]; 1.0 while stabilising.
    batch_size: real images per D step (the global batch, all processes together).
    lr_scale:   multiplier applied to the optimizers' base learning rates in this phase.
    start_nimg: images shown when this phase began.
    end_nimg:   images shown when this phase ends (``math.inf`` for the last one).
    fade_nimg:  length of this phase's fade-in in images (0 when it does not fade).
    batch_gpu:  images one process runs through the networks at a time (``growth.batch_gpu``):
                each D step's per-process batch is processed in rounds of this many images whose
                gradients add up before the optimizer step (gradient accumulation,
                ``StepContext.accumulate``); None, or a value >= the per-process batch, runs the
                whole batch at once.
    """

    index: int
    resolution: int
    alpha: float
    batch_size: int
    lr_scale: float = 1.0
    start_nimg: int = 0
    end_nimg: float = math.inf
    fade_nimg: int = 0
    batch_gpu: int | None = None


def resize_real(images: torch.Tensor, resolution: int) -> torch.Tensor:
    """Box-filter ``images[N,C,H,W]`` down to ``resolution`` (average of each k x k block)."""
    size = images.shape[-1]
    if size == resolution:
        return images
    if size % resolution:
        raise ValueError(f"cannot downsample {size}px images to {resolution}px")
    return F.avg_pool2d(images, size // resolution)


def fade_real(images: torch.Tensor, resolution: int, alpha: float | torch.Tensor) -> torch.Tensor:
    """Real images as the networks see them during a fade: ``[N,C,res,res]``.

    The image at ``resolution`` is blended with the same image at half resolution upsampled
    (nearest): ``alpha * x + (1 - alpha) * up(down(x))``, which matches what the growing
    generator produces (PGGAN section 2, Fig. 2; official code ``process_reals``).
    """
    x = resize_real(images, resolution)
    if isinstance(alpha, float) and alpha >= 1.0:
        return x
    low = F.interpolate(F.avg_pool2d(x, 2), scale_factor=2, mode="nearest")
    return torch.lerp(low, x, alpha if isinstance(alpha, torch.Tensor) else float(alpha))
