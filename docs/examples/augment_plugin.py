"""Example gankit plugin: an augmentation (kind ``augment``, recipe ``[augment]``).

``xflip``: mirror each image left-right with probability ``p`` - one of the augmentations
that do not leak into G's output (Karras et al. 2020, "Training Generative Adversarial Networks
with Limited Data", sec. 2.2: an invertible transform applied with p < 1). The engine applies
it to every image D sees (reals and fakes, in every strategy and penalty), so it must be
differentiable: flipping is a permutation of pixels, so gradients flow through it to G.

Use it::

    plugins = ["augment_plugin.py"]
    [augment]
    name = "xflip"
    p = 0.5
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from gan_kit import Augment, batch_rand, hookimpl, option


class XFlip(Augment):
    """``images[N,C,H,W] -> images`` (same shape and dtype), each sample flipped with probability p."""

    @attrs.frozen
    class Options:
        p: float = option(0.5, help="Probability of flipping each image.",
                          validator=lambda v: None if 0 <= v < 1 else f"must be in [0, 1), got {v} (p = 1 leaks)")

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        # A fresh draw per call and per sample, from the global torch RNG, so resume is exact;
        # batch_rand draws for the global batch and slices, so N processes match one.
        flip = batch_rand(images.shape[0], 1, 1, 1, device=images.device) < self.options.p
        return torch.where(flip, images.flip(-1), images)

    def end_step(self, step: int, nimg: int) -> dict[str, Any]:
        # Stats joined to the iteration's stats (ADA reports its adapted p this way).
        return {"Augment/p": self.options.p}


@hookimpl
def register_augmentations(register):
    register("xflip", XFlip)
