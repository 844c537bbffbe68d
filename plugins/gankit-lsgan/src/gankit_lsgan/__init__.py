"""gankit-lsgan: the least-squares GAN loss and a truncated-normal initializer, as a gankit plugin.

Uses only gankit's public API (``from gan_kit import ...``). Registered through the ``gankit``
entry-point group (see pyproject.toml), so installing the distribution is all it takes::

    pip install -e plugins/gankit-lsgan
    gankit list-plugins --kind loss      # lsgan  gankit-lsgan 0.1.0

and in a recipe::

    [loss]
    name = "lsgan"        # a = 0, b = 1, c = 1: the paper's 0-1 coding (eq. 9)

    [init]
    name = "truncated-normal"
    std = 0.02
"""

from __future__ import annotations

import attrs
import torch
from torch import nn

from gan_kit import Initializer, Loss, hookimpl, option, weight_layers

__version__ = "0.1.0"
__all__ = ["LSGAN", "TruncatedNormal", "register_losses", "register_initializers"]


class LSGAN(Loss):
    """Least-squares GAN (Mao et al. 2017, eq. 2): D: 0.5 E[(D(x)-b)^2] + 0.5 E[(D(G(z))-a)^2]; G: 0.5 E[(D(G(z))-c)^2]."""

    @attrs.frozen
    class Options:
        a: float = option(0.0, help="Target of D's output for fake images. 0 in the 0-1 coding (default); "
                                    "-1 in the paper's Pearson chi^2 variant (a=-1, b=1, c=0, eq. 8).")
        b: float = option(1.0, help="Target of D's output for real images (1 in both codings).")
        c: float = option(1.0, help="Value G wants D to output for fakes. 1 in the 0-1 coding (default); "
                                    "0 in the Pearson chi^2 variant.")

    def d_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        o = self.options
        return 0.5 * (real_logits - o.b).square().mean() + 0.5 * (fake_logits - o.a).square().mean()

    def g_loss(self, fake_logits: torch.Tensor, real_logits: torch.Tensor | None = None) -> torch.Tensor:
        return 0.5 * (fake_logits - self.options.c).square().mean()

    @classmethod
    def problems(cls, options, recipe):
        # Checked at recipe load, together with every other problem of the recipe.
        if options.a == options.b:
            yield "b", f"must differ from a (both are {options.a}): D could not tell real from fake (e.g. a = 0, b = 1)"


class TruncatedNormal(Initializer):
    """N(0, std^2) weights truncated to [-cutoff*std, cutoff*std], zero biases, on every conv and linear layer."""

    @attrs.frozen
    class Options:
        std: float = option(0.02, help="Standard deviation of the weights before truncation.",
                            validator=lambda v: None if v > 0 else f"must be > 0, got {v} (e.g. std = 0.02)")
        cutoff: float = option(2.0, help="Truncation point in standard deviations (2 = TensorFlow's truncated_normal).",
                               validator=lambda v: None if v > 0 else f"must be > 0, got {v} (e.g. cutoff = 2.0)")

    @torch.no_grad()
    def apply(self, module: nn.Module) -> None:
        std, cut = self.options.std, self.options.cutoff
        for layer in weight_layers(module):  # every conv, transposed conv and linear layer
            nn.init.trunc_normal_(layer.weight, mean=0.0, std=std, a=-cut * std, b=cut * std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


@hookimpl
def register_losses(register):
    register("lsgan", LSGAN)


@hookimpl
def register_initializers(register):
    register("truncated-normal", TruncatedNormal)
