"""Adaptive pseudo augmentation, APA (Jiang et al., "Deceive D: Adaptive Pseudo Augmentation for
GAN Training with Limited Data", NeurIPS 2021, sec. 3): the ``apa`` augmentation.

With probability p per sample, D's real batch holds one of G's fakes instead of the real image
(a "pseudo-real"), so an overfitting D is fed its own opponent's images labelled real. p adapts as
ADA's (Karras et al. 2020, sec. 3) from the overfitting heuristic ``lambda_r = E[sign(D(x))]`` on
the (mixed) real batch: every ``interval`` iterations ``p <- clamp(p + sign(lambda_r - target) *
nimg * interval / (kimg * 1000), 0, 1)``, ``nimg`` the real images one iteration shows. APA
transforms no image: D sees every image as it is; the mixing happens through the augment
interface's ``reals_for_d`` (docs/writing-plugins.md), which every D objective calls.
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import Augment, batch_rand, hookimpl, option
from gan_kit.builtin.augment.adaptive_p import AdaptiveP

__all__ = ["AdaptivePseudoAugment"]


class AdaptivePseudoAugment(Augment):
    """APA: fakes in place of reals in D's real batch with an adaptive probability p.

    ``reals_for_d(real[N,C,H,W], fake[N,C,H,W])`` keeps each real with probability 1 - p and
    takes the fake of the same index otherwise (one ``gan_kit.batch_rand`` draw per sample, so N
    processes mix as one; no host sync). ``feedback`` / ``end_step`` adapt p as ADA does (the
    signs summed over processes at each adjustment). State in checkpoints: ``p`` and the sign
    accumulators. Stats: ``Augment/p`` (and ``Augment/rt`` at an adjustment).
    """

    @attrs.frozen
    class Options:
        target: float | None = option(0.6, help="Target of lambda_r = E[sign(D(real))] (APA: 0.6); None = a fixed "
                                                "p, p_init throughout.",
                                      validator=lambda v: None if v is None or -1.0 <= v <= 1.0
                                      else f"must be in [-1, 1] or none, got {v}")
        interval: int = option(4, help="Iterations between two adjustments of p (APA, ADA: 4).", min=1, max=10000)
        kimg: float = option(100.0, help="Speed of p: thousands of real images over which p can go from 0 to 1 "
                                         "(the APA and ADA code's 100 for short runs).", min=0, min_exclusive=True)
        p_init: float = option(0.0, help="Pseudo-real probability p at the start (APA: 0); with target = none, the "
                                         "fixed p.", min=0, max=1)

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        self.adaptive = AdaptiveP(self.options.p_init)

    @property
    def p(self) -> torch.Tensor:
        """The pseudo-real probability (0-d tensor; ``gan_kit.builtin.augment.adaptive_p``)."""
        return self.adaptive.p

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return images

    def reals_for_d(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        shape = (real.shape[0],) + (1,) * (real.dim() - 1)
        pseudo = batch_rand(*shape, device=real.device) < self.adaptive.on(real.device)
        return torch.where(pseudo, fake.to(real.dtype), real)

    def feedback(self, real_logits: torch.Tensor) -> None:
        self.adaptive.feedback(real_logits)

    def end_step(self, step: int, nimg: int) -> dict:
        o = self.options
        if o.target is None:
            return self.adaptive.fix(o.p_init)
        return self.adaptive.adjust(step, nimg, target=o.target, interval=o.interval, kimg=o.kimg)

    def state_dict(self) -> dict:
        return self.adaptive.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.adaptive.load_state_dict(state, "apa")
        if self.options.target is None:
            self.adaptive.p = torch.tensor(float(self.options.p_init))


@hookimpl
def register_augmentations(register):
    """Register ``apa`` (kind ``augment``)."""
    register("apa", AdaptivePseudoAugment)
