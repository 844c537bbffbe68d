"""Built-in image distances (kind ``distance``, ``gankit project --distance NAME``):
``pixel-multiscale`` here, the default, which needs no file; ``lpips-vgg16`` (LPIPS on VGG16
features, from a weights file the user gives) in ``lpips``."""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from gan_kit import Distance, hookimpl, option

__all__ = ["PixelMultiscale", "check_pair"]


def check_pair(name: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise ValueError unless ``a`` and ``b`` are image batches ``[N, C, H, W]`` of one shape
    (what every built-in distance compares), naming the distance and both shapes."""
    if a.dim() != 4 or a.shape != b.shape:
        raise ValueError(f"distance {name}: expected two image batches [N, C, H, W] of one shape, "
                         f"got {tuple(a.shape)} and {tuple(b.shape)}")


class PixelMultiscale(Distance):
    """Mean squared pixel error plus the same error on an average-pooled pyramid down to min_size px: works offline, no weights.

    ``d(a, b) = pixel_weight * mse(a, b) + pyramid_weight * mean_l mse(P_l a, P_l b)``, per image,
    where ``mse`` is the mean of ``(a - b)^2`` over channels and pixels (images in [-1, 1]) and
    ``P_l`` averages 2^l x 2^l blocks (``avg_pool2d`` by 2, l times), for l = 1, 2, ... while the
    shorter side of ``P_l a`` stays >= ``min_size``: a 64 px image has levels at 32, 16, 8 and
    4 px. The coarse levels compare local mean colours, so a shape or a colour in the wrong place
    costs at every level and an optimisation of W (``gankit project``) is pulled toward the
    target's layout before its detail, which the full-resolution term then fits. An image smaller
    than ``2 * min_size`` has no level: the pyramid term is 0. The pyramid is the low-pass
    pyramid of Burt & Adelson 1983 ("The Laplacian Pyramid as a Compact Image Code") with a 2x2
    box filter in place of their 5-tap kernel. Not a perceptual distance: ``lpips-vgg16`` is one.
    Raises ValueError for two batches of different shapes.
    """

    @attrs.frozen
    class Options:
        pixel_weight: float = option(1.0, help="Weight of the mean squared error at full resolution.", min=0)
        pyramid_weight: float = option(1.0, help="Weight of the mean over the pyramid levels of their mean squared "
                                                 "error (0 = plain MSE).", min=0)
        min_size: int = option(4, help="Smallest side of a pyramid level, in pixels.", min=1)

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        check_pair("pixel-multiscale", a, b)
        o = self.options
        diff = (a - b).float()  # the pyramid of a - b is the difference of the pyramids: pooling is linear
        total = o.pixel_weight * diff.square().mean(dim=(1, 2, 3))
        levels = []
        while min(diff.shape[-2:]) // 2 >= o.min_size:
            diff = F.avg_pool2d(diff, 2)
            levels.append(diff.square().mean(dim=(1, 2, 3)))
        if levels and o.pyramid_weight:
            total = total + o.pyramid_weight * torch.stack(levels).mean(dim=0)
        return total


@hookimpl
def register_distances(register):
    register("pixel-multiscale", PixelMultiscale)
