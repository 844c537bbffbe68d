"""Example gankit plugin: a loss (kind ``loss``, recipe ``[loss] name = "ragan"``).

The relativistic average standard GAN loss, RaSGAN (Jolicoeur-Martineau 2019, "The relativistic
discriminator: a key element missing from standard GAN", ICLR, section 4.2). D judges whether a
real image looks more real than the average fake, so G's loss needs D's logits on real images
too: the class sets ``needs_real_logits = True`` and every update strategy passes them.

Use it::

    plugins = ["loss_plugin.py"]
    [loss]
    name = "ragan"
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gan_kit import Loss, hookimpl


class RaGAN(Loss):
    """RaSGAN from logits: with ``C`` the raw logits,
    D: ``softplus(-(C(x_r) - mean C(x_f))) + softplus(C(x_f) - mean C(x_r))`` (means over the batch);
    G: the same with real and fake swapped. Shapes: logits ``[N]`` -> scalar."""

    #: G's loss compares fakes with the reals' mean logit: ask for D's logits on real images.
    needs_real_logits = True

    def d_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        return self._relativistic(real_logits, fake_logits)

    def g_loss(self, fake_logits: torch.Tensor, real_logits: torch.Tensor | None = None) -> torch.Tensor:
        if real_logits is None:
            raise ValueError("ragan: g_loss needs D's logits on real images (real_logits), got None")
        return self._relativistic(fake_logits, real_logits)

    @staticmethod
    def _relativistic(winner: torch.Tensor, loser: torch.Tensor) -> torch.Tensor:
        # softplus(-t) = -log(sigmoid(t)): the BCE of a logit, stable for large |t|.
        return F.softplus(-(winner - loser.mean())).mean() + F.softplus(loser - winner.mean()).mean()


@hookimpl
def register_losses(register):
    register("ragan", RaGAN)
