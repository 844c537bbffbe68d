"""Regularisers of D. Each returns an unweighted scalar; the recipe's ``weight`` multiplies it.

Gradient norms are taken per sample over every non-batch dimension (C, H, W together), in
float32 (``ctx.input_gradients``), with a small epsilon inside the square root so the penalty and
its gradient stay finite when D's gradient is exactly zero.
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import Penalty, hookimpl, option

_EPS = 1e-12


def per_sample_norm(grad: torch.Tensor) -> torch.Tensor:
    """L2 norm of each sample's gradient over all non-batch dims: ``[N,...] -> [N]``."""
    return torch.sqrt(grad.float().flatten(1).square().sum(dim=1) + _EPS)


class GradientPenalty(Penalty):
    """WGAN-GP gradient penalty (Gulrajani et al. 2017, eq. 3): E[(||grad D(x_hat)|| - target)^2] on random real/fake interpolates."""

    @attrs.frozen
    class Options:
        target: float = option(1.0, help="Target gradient norm (1 in WGAN-GP; PGGAN's CIFAR runs used 750).",
                               validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")

    def __call__(self, inputs, ctx):
        real, fake = inputs.real, inputs.fake
        shape = (real.shape[0], *([1] * (real.dim() - 1)))
        # ctx.batch_rand draws for the global batch and keeps this process's slice, so a
        # multi-process run uses the same interpolates as a one-process run.
        eps = ctx.batch_rand(*shape, device=real.device)
        x_hat = torch.lerp(fake.float(), real.float(), eps)
        norm = per_sample_norm(ctx.input_gradients(inputs.D, x_hat))
        return (norm - self.options.target).square().mean()


@attrs.frozen
class LazyOptions:
    interval: int = option(1, help="Lazy regularisation: a step of its own every this many iterations, "
                                   "scaled by the interval, with Adam's lr and betas corrected "
                                   "(StyleGAN2, sec. 3.1; 16 there). 1 = part of every D objective. "
                                   "Lazy D penalties due at the same iteration share one step.",
                           validator=lambda v: None if v >= 1 else f"must be >= 1, got {v}")


class R1(Penalty):
    """R1 penalty (Mescheder et al. 2018, eq. 9): 0.5 * E||grad D(x)||^2 on real images; the weight is gamma."""

    Options = LazyOptions
    input_gradients_of = ("real",)

    @property
    def interval(self) -> int:
        return self.options.interval

    def __call__(self, inputs, ctx):
        grad = inputs.real_grad if inputs.real_grad is not None else ctx.input_gradients(inputs.D, inputs.real)
        return 0.5 * grad.flatten(1).square().sum(dim=1).mean()


class R2(R1):
    """R2 penalty (Mescheder et al. 2018, eq. 10; R3GAN, Huang et al. 2024, sec. 2.3): 0.5 * E||grad D(x_f)||^2 on fake images.

    R3GAN's D objective is ``rpgan + gamma/2 * (R1 + R2)``: list ``r1`` and ``r2`` with the same
    weight gamma (and the same ``interval`` to regularise lazily; both then run in one lazy D
    step). The fakes are the D objective's own (``inputs.fake``, detached); a lazy step, which
    has none, draws a fresh batch from G under ``no_grad`` (for the real batch's classes in a
    conditional run). Returns a float32 scalar; ``[N,C,H,W]`` fakes, norms over C, H, W.
    """

    input_gradients_of = ("fake",)

    def __call__(self, inputs, ctx):
        grad = inputs.fake_grad
        if grad is None:
            fake = inputs.fake
            if fake is None:
                with torch.no_grad(), ctx.autocast():
                    fake = ctx.generate(ctx.latent(inputs.real.shape[0]), inputs.labels)
            grad = ctx.input_gradients(inputs.D, fake)
        return 0.5 * grad.flatten(1).square().sum(dim=1).mean()


class Drift(Penalty):
    """Drift term of PGGAN (Karras et al. 2018, appendix A.1): E[D(x)^2] on real logits, keeps the critic near 0."""

    def __call__(self, inputs, ctx):
        logits = inputs.real_logits
        if logits is None:  # a lazy regularisation step has no D objective to borrow logits from
            with ctx.autocast():
                logits = inputs.D(inputs.real)
        return logits.float().square().mean()


@hookimpl
def register_penalties(register):
    register("gradient-penalty", GradientPenalty)
    register("r1", R1)
    register("r2", R2)
    register("drift", Drift)
