"""The DCGAN architecture (Radford et al. 2016, sec. 3 and fig. 1), generalised to any
power-of-two resolution >= 8: transposed convolutions with batch norm and ReLU in G (tanh
output), strided convolutions with leaky ReLU (0.2) in D, batch norm on every D layer but the
first. It does not grow: use it with the ``static`` growth scheduler."""

from __future__ import annotations

import math

import attrs
import torch
from torch import nn

from gan_kit import Architecture, hookimpl, option
from gan_kit.builtin.architectures.conditioning import ClassEmbedding, check_labels, projection, projection_embedding


class DCGANGenerator(nn.Module):
    """G: ``z[N, latent_dim] -> images[N, C, r, r]`` in (-1, 1); with ``num_classes`` > 0
    ``G(z, labels[N])``, a learned class vector concatenated to z."""

    def __init__(self, resolution, channels, latent_dim, ngf, num_classes: int = 0):
        super().__init__()
        self.latent_dim = latent_dim
        self.num_classes = num_classes
        self.embed = ClassEmbedding(num_classes, latent_dim) if num_classes else None
        n_up = int(math.log2(resolution)) - 2
        width = ngf * 2 ** (n_up - 1)
        cin = latent_dim * (2 if num_classes else 1)
        layers = [nn.ConvTranspose2d(cin, width, 4, 1, 0, bias=False), nn.BatchNorm2d(width), nn.ReLU(True)]
        for _ in range(n_up - 1):
            layers += [nn.ConvTranspose2d(width, width // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(width // 2), nn.ReLU(True)]
            width //= 2
        layers += [nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z, labels=None):
        check_labels(self, self.num_classes, labels, z.shape[0])
        if self.embed is not None:
            z = torch.cat([z, self.embed(labels).to(z.dtype)], dim=1)
        return self.net(z.reshape(z.shape[0], -1, 1, 1))


class DCGANDiscriminator(nn.Module):
    """D: ``images[N, C, r, r] -> logits[N]``; with ``num_classes`` > 0 ``D(images, labels[N])``,
    a projection D (Miyato & Koyama 2018) on the spatially summed features before the last conv.
    ``features(images) -> [N, feature_dim]``: those summed features (what the ``ac`` / ``d2d-ce``
    penalties put their heads on)."""

    def __init__(self, resolution, channels, ndf, num_classes: int = 0):
        super().__init__()
        self.num_classes = num_classes
        n_down = int(math.log2(resolution)) - 2
        width = ndf
        layers = [nn.Conv2d(channels, width, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
        for _ in range(n_down - 1):
            layers += [nn.Conv2d(width, width * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(width * 2), nn.LeakyReLU(0.2, True)]
            width *= 2
        self.net = nn.Sequential(*layers, nn.Conv2d(width, 1, 4, 1, 0, bias=False))  # the last: the logit
        self.embed = projection_embedding(num_classes, width) if num_classes else None
        self.feature_dim = width

    def features(self, x):
        return self.net[:-1](x).sum(dim=(2, 3))

    def forward(self, x, labels=None):
        check_labels(self, self.num_classes, labels, x.shape[0])
        if self.embed is None:
            return self.net(x).flatten()
        h = self.net[:-1](x)
        return self.net[-1](h).flatten() + projection(self.embed, labels, h.sum(dim=(2, 3)))


class DCGAN(Architecture):
    """DCGAN (Radford et al. 2016): transposed-conv G with batch norm, strided-conv D with leaky ReLU; static resolution."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(100, help="Size of the latent z (DCGAN: 100).", min=1, max=2**16)
        ngf: int = option(64, help="G feature maps of the last transposed convolution (doubled per layer going up).",
                          min=1, max=2**12)
        ndf: int = option(64, help="D feature maps of the first convolution (doubled per layer).", min=1, max=2**12)

    @classmethod
    def problems(cls, o, recipe):
        if recipe.resolution < 8:
            yield "", f"dcgan needs data.resolution >= 8, got {recipe.resolution}"
        if recipe.growth.name != "static":
            yield "", f"dcgan does not grow: use [growth] name = \"static\", not {recipe.growth.name!r}"

    supports_conditional = True

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def build(self, resolution, channels):
        o = self.options
        k = self.context.num_classes
        return (DCGANGenerator(resolution, channels, o.latent_dim, o.ngf, num_classes=k),
                DCGANDiscriminator(resolution, channels, o.ndf, num_classes=k))


@hookimpl
def register_architectures(register):
    register("dcgan", DCGAN)
