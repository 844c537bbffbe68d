"""Example gankit plugin: a metric (kind ``metric``, recipe ``[[metric]]`` with ``every_kimg``).

``moment-gap``: how far G_ema's images are from the real ones in their per-pixel mean and
standard deviation - a cheap sanity check, not a measure of image quality (it looks at raw
pixels, one at a time).

The class declares what reports need: ``num_images`` (images per set; the run caps it at the
data set's size), ``min_images`` (below it the recipe is refused), ``unit`` and
``higher_is_better``.

Use it::

    plugins = ["metric_plugin.py"]
    [[metric]]
    name = "moment-gap"
    every_kimg = 50
    num_images = 512
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch

from gan_kit import Metric, hookimpl, option


class MomentGap(Metric):
    """``mean_p |mu_fake(p) - mu_real(p)| + mean_p |sigma_fake(p) - sigma_real(p)|`` over pixels p,
    in pixel units of the [-1, 1] range; 0 when both moments match. Key ``Metrics/moment-gap``."""

    min_images = 2  # a standard deviation needs two images
    unit = "px"
    higher_is_better = False

    @attrs.frozen
    class Options:
        num_images: int = option(512, help="Real and generated images compared.",
                                 validator=lambda v: None if v >= 2 else f"must be >= 2, got {v}")

    @property
    def num_images(self) -> int:
        return self.options.num_images

    def compute(self, generate: Callable[[int], torch.Tensor], reals: torch.Tensor,
                device: torch.device) -> dict[str, float]:
        fake = generate(reals.shape[0]).float()  # [n, C, H, W] from G_ema, in [-1, 1]
        real = reals.float()
        gap = (fake.mean(0) - real.mean(0)).abs().mean() + (fake.std(0) - real.std(0)).abs().mean()
        return {"Metrics/moment-gap": float(gap)}


@hookimpl
def register_metrics(register):
    register("moment-gap", MomentGap)
