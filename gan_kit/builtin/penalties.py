"""D regularisers. Each returns an unweighted scalar; the recipe's ``weight`` multiplies it.

Gradient norms are taken per sample over every non-batch dimension (C, H, W together), in
float32, with a small epsilon inside the square root so the penalty and its gradient stay finite
when D's gradient is exactly zero.
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import Penalty, hookimpl, option

_EPS = 1e-12


def input_gradients(D, x: torch.Tensor, ctx=None) -> torch.Tensor:
    """``d sum(D(x)) / dx`` with a graph for double backprop, float32, shape of ``x``.

    Under a GradScaler the logits are scaled before ``autograd.grad`` and the gradients unscaled
    after, so fp16 gradients do not underflow (PyTorch AMP docs, "Gradient penalty").
    """
    x = x.detach().float().requires_grad_(True)
    autocast = ctx.autocast if ctx is not None else None
    if autocast is not None:
        with autocast():
            logits = D(x)
    else:
        logits = D(x)
    out = logits.float().sum()
    scaler = getattr(ctx, "scaler", None) if ctx is not None else None
    if scaler is not None:
        out = scaler.scale(out)
    (grad,) = torch.autograd.grad(out, x, create_graph=True)
    grad = grad.float()
    if scaler is not None:
        grad = grad / scaler.get_scale()
    return grad


def per_sample_norm(grad: torch.Tensor) -> torch.Tensor:
    """L2 norm of each sample's gradient over all non-batch dims: ``[N,...] -> [N]``."""
    return torch.sqrt(grad.float().flatten(1).square().sum(dim=1) + _EPS)


class GradientPenalty(Penalty):
    """WGAN-GP gradient penalty (Gulrajani et al. 2017, eq. 3): E[(||grad D(x_hat)|| - target)^2] on random real/fake interpolates."""

    @attrs.frozen
    class Options:
        target: float = option(1.0, help="Target gradient norm (1 in WGAN-GP; PGGAN's CIFAR runs used 750).",
                               validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")

    def __call__(self, D, real, fake, ctx=None):
        shape = (real.shape[0], *([1] * (real.dim() - 1)))
        # ctx.batch_rand draws for the global batch and keeps this process's slice, so a
        # multi-process run uses the same interpolates as a one-process run.
        eps = ctx.batch_rand(*shape, device=real.device) if ctx is not None else torch.rand(shape, device=real.device)
        x_hat = torch.lerp(fake.detach().float(), real.detach().float(), eps)
        norm = per_sample_norm(input_gradients(D, x_hat, ctx))
        return (norm - self.options.target).square().mean()


class R1(Penalty):
    """R1 penalty (Mescheder et al. 2018, eq. 9): 0.5 * E||grad D(x)||^2 on real images; the weight is gamma."""

    @attrs.frozen
    class Options:
        interval: int = option(1, help="Lazy regularisation: apply every this many D steps, scaled by the "
                                       "interval (StyleGAN2, sec. 3.1). 1 = every step.",
                               validator=lambda v: None if v >= 1 else f"must be >= 1, got {v}")

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        self.interval = self.options.interval

    def __call__(self, D, real, fake, ctx=None):
        grad = input_gradients(D, real, ctx)
        return 0.5 * grad.flatten(1).square().sum(dim=1).mean() * self.interval


class Drift(Penalty):
    """Drift term of PGGAN (Karras et al. 2018, appendix A.1): E[D(x)^2] on real logits, keeps the critic near 0."""

    def __call__(self, D, real, fake, ctx=None):
        if ctx is not None:
            with ctx.autocast():
                logits = D(real)
        else:
            logits = D(real)
        return logits.float().square().mean()


@hookimpl
def register_penalties(register):
    register("gradient-penalty", GradientPenalty)
    register("r1", R1)
    register("drift", Drift)
