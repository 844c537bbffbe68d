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

from gan_kit import Augment, GankitError, batch_rand, hookimpl, option

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
        self.p = torch.tensor(float(self.options.p_init))
        self.sign_sum = torch.tensor(0.0)
        self.sign_count = torch.tensor(0.0)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return images

    def reals_for_d(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        if self.p.device != real.device:
            self.p = self.p.to(real.device)  # once: no host-to-device copy per call
        shape = (real.shape[0],) + (1,) * (real.dim() - 1)
        pseudo = batch_rand(*shape, device=real.device) < self.p
        return torch.where(pseudo, fake.to(real.dtype), real)

    def feedback(self, real_logits: torch.Tensor) -> None:
        # NaN logits are a D step that was not applied (a skipped mixed-precision step): not counted.
        logits = real_logits.detach().float()
        counted = ~torch.isnan(logits)
        signs = torch.where(counted, logits.sign(), torch.zeros_like(logits))
        if self.sign_sum.device != signs.device:
            self.sign_sum, self.sign_count = self.sign_sum.to(signs.device), self.sign_count.to(signs.device)
        self.sign_sum = self.sign_sum + signs.sum()
        self.sign_count = self.sign_count + counted.sum()

    def end_step(self, step: int, nimg: int) -> dict:
        o = self.options
        if o.target is None:
            self.p = torch.full((), float(o.p_init), device=self.p.device)
            return {"Augment/p": self.p}
        if step % o.interval:
            return {"Augment/p": self.p}
        dev = self.sign_sum.device
        totals = torch.stack([self.sign_sum, self.sign_count])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(totals)
        r_t = totals[0] / totals[1].clamp(min=1.0)
        adjust = torch.sign(r_t - o.target) * (nimg * o.interval / (o.kimg * 1000.0)) * (totals[1] > 0).float()
        self.p = (self.p.to(dev) + adjust).clamp(0.0, 1.0)
        self.sign_sum = torch.zeros((), device=dev)
        self.sign_count = torch.zeros((), device=dev)
        return {"Augment/p": self.p, "Augment/rt": r_t}

    def state_dict(self) -> dict:
        return {"p": self.p.detach().cpu().clone(), "sign_sum": self.sign_sum.detach().cpu().clone(),
                "sign_count": self.sign_count.detach().cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        missing = [k for k in ("p", "sign_sum", "sign_count") if k not in state]
        if missing:
            raise GankitError(f"augment: the checkpoint's augmentation state lacks {', '.join(missing)} "
                              f"(it was not written by 'apa'; resume with the augmentation that wrote it)")
        self.p = torch.as_tensor(state["p"], dtype=torch.float32).clone()
        self.sign_sum = torch.as_tensor(state["sign_sum"], dtype=torch.float32).clone()
        self.sign_count = torch.as_tensor(state["sign_count"], dtype=torch.float32).clone()
        if self.options.target is None:
            self.p = torch.tensor(float(self.options.p_init))


@hookimpl
def register_augmentations(register):
    """Register ``apa`` (kind ``augment``)."""
    register("apa", AdaptivePseudoAugment)
