"""Example gankit plugin: three penalties (kind ``penalty``, recipe ``[[penalty]]`` with a ``weight``).

* ``fake-r2``: R2 on fake images (a copy of the built-in ``r2``, to show the verbs), through the
  public input-gradient verb ``ctx.input_gradients``;
* ``zero-gp``: on real/fake interpolates, taking the gradient itself with ``ctx.gradients``
  (``torch.autograd.grad`` made safe for fp16: scaled before and unscaled after);
* ``mode-seeking``: a penalty of G (``network = "G"``) run lazily every ``interval`` iterations.

Use them::

    plugins = ["penalty_plugin.py"]
    [[penalty]]
    name = "fake-r2"
    weight = 1.0
    [[penalty]]
    name = "zero-gp"
    weight = 10.0
    [[penalty]]
    name = "mode-seeking"
    weight = 0.1
    interval = 4
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import DInputs, GInputs, Penalty, StepContext, hookimpl, option


def _sq_norms(grad: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm of each sample's gradient over C, H, W: ``[N,C,H,W] -> [N]``, float32."""
    return grad.float().flatten(1).square().sum(dim=1)


class R2(Penalty):
    """R2 (Mescheder et al. 2018, "Which Training Methods for GANs do actually Converge?", sec. 4.1):
    ``0.5 * E ||grad_x D(x)||^2`` on fake images x. Returns an unweighted scalar; the recipe's
    ``weight`` is the paper's gamma."""

    def __call__(self, inputs: DInputs, ctx: StepContext) -> torch.Tensor:
        if inputs.fake is None:  # a lazy regularisation step makes no fakes
            raise ValueError("r2 needs the fakes of a D step; it cannot run lazily")
        # float32 d sum(D(x)) / dx with a graph for the double backward, whatever the precision.
        grad = ctx.input_gradients(inputs.D, inputs.fake)
        return 0.5 * _sq_norms(grad).mean()


class ZeroGP(Penalty):
    """Zero-centred gradient penalty on interpolates (Thanh-Tung, Tran and Venkatesh 2019,
    "Improving Generalization and Stability of Generative Adversarial Networks", ICLR):
    ``E ||grad D(x_hat)||^2`` with ``x_hat = eps * real + (1 - eps) * fake``, eps ~ U[0, 1] per sample."""

    def __call__(self, inputs: DInputs, ctx: StepContext) -> torch.Tensor:
        if inputs.fake is None:
            raise ValueError("zero-gp needs the fakes of a D step; it cannot run lazily")
        real, fake = inputs.real.float(), inputs.fake.float()  # fakes are bf16/fp16 under autocast
        # batch_rand: drawn for the global batch and sliced, so 1 and 2 processes interpolate alike.
        eps = ctx.batch_rand(real.shape[0], 1, 1, 1, device=real.device)
        x_hat = torch.lerp(fake, real, eps).requires_grad_(True)
        with ctx.autocast():
            logits = inputs.D(x_hat)
        # ctx.gradients = torch.autograd.grad(..., create_graph=True) in float32, scaled around
        # the fp16 GradScaler so small gradients do not underflow.
        grad = ctx.gradients(logits.float().sum(), x_hat)
        return _sq_norms(grad).mean()


class ModeSeeking(Penalty):
    """Mode-seeking regulariser of G (Mao et al. 2019, "Mode Seeking Generative Adversarial Networks
    for Diverse Image Synthesis", CVPR 2019, sec. 3): G should map distant latents to distant images,
    so it minimises ``1 / (d_I / d_z + 1e-5)`` with ``d_I = mean|G(z1) - G(z2)|`` and
    ``d_z = mean|z1 - z2|``. Run as its own G step every ``interval`` iterations (lazy
    regularisation, StyleGAN2 sec. 3.1): the engine multiplies it by ``weight * interval``."""

    network = "G"

    @attrs.frozen
    class Options:
        interval: int = option(4, help="Run every this many iterations as a G step of its own (1 = in every G objective).",
                               validator=lambda v: None if v >= 1 else f"must be >= 1, got {v} (e.g. interval = 4)")

    @property
    def interval(self) -> int:
        return self.options.interval

    def __call__(self, inputs: GInputs, ctx: StepContext) -> torch.Tensor:
        n = inputs.batch_size
        z1, z2 = ctx.latent(n), ctx.latent(n)
        with ctx.autocast():
            x = inputs.G(torch.cat([z1, z2])).float()  # one forward for both halves
        d_image = (x[:n] - x[n:]).abs().mean()
        d_latent = (z1 - z2).abs().mean()
        return 1.0 / (d_image / d_latent + 1e-5)


@hookimpl
def register_penalties(register):
    register("fake-r2", R2)
    register("zero-gp", ZeroGP)
    register("mode-seeking", ModeSeeking)
