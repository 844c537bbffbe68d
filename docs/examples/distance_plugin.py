"""Example gankit plugin: an image distance (kind ``distance``, ``gankit project --distance``).

``edges``: how far apart two images' edges are - the mean squared difference of their
horizontal and vertical finite differences (image gradients), plus a share of the plain pixel
error so flat regions still count. A projection with it fits outlines first and cares less about
a uniform shift of brightness.

A distance has no recipe table: the projector builds it from ``--distance NAME`` and
``--set-distance KEY=VALUE`` (TOML values). Install the plugin (entry point in the ``gankit``
group) and use it::

    gankit project runs/stylegan2/checkpoints/latest.pt --target digit.png --outdir proj \\
        --distance edges --set-distance pixel_share=0.1
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import Distance, hookimpl, option


class Edges(Distance):
    """``mean((dx a - dx b)^2) + mean((dy a - dy b)^2) + pixel_share * mean((a - b)^2)`` per image,
    dx / dy the differences of neighbouring pixels along the width / height; 0 for identical
    images. Images in [-1, 1], ``[N, C, H, W]`` -> ``[N]``."""

    @attrs.frozen
    class Options:
        pixel_share: float = option(0.1, help="Weight of the plain mean squared pixel error beside the edges' "
                                              "(0 = edges only: a constant brightness shift is then free).", min=0)

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = (a - b).float()  # differences are linear: the edges of a - b are the difference of the edges
        dx = d[..., :, 1:] - d[..., :, :-1]
        dy = d[..., 1:, :] - d[..., :-1, :]
        edges = dx.square().flatten(1).mean(1) + dy.square().flatten(1).mean(1)
        return edges + self.options.pixel_share * d.square().flatten(1).mean(1)


@hookimpl
def register_distances(register):
    register("edges", Edges)
