"""The DCGAN architecture (Radford et al. 2016, sec. 3 and fig. 1), generalised to any
power-of-two resolution >= 8: transposed convolutions with batch norm and ReLU in G (tanh
output), strided convolutions with leaky ReLU (0.2) in D, batch norm on every D layer but the
first. It does not grow: use it with the ``static`` growth scheduler."""

from __future__ import annotations

import math

import attrs
from torch import nn

from gan_kit import Architecture, hookimpl, option


class DCGANGenerator(nn.Module):
    """G: ``z[N, latent_dim] -> images[N, C, r, r]`` in (-1, 1)."""

    def __init__(self, resolution, channels, latent_dim, ngf):
        super().__init__()
        self.latent_dim = latent_dim
        n_up = int(math.log2(resolution)) - 2
        width = ngf * 2 ** (n_up - 1)
        layers = [nn.ConvTranspose2d(latent_dim, width, 4, 1, 0, bias=False), nn.BatchNorm2d(width), nn.ReLU(True)]
        for _ in range(n_up - 1):
            layers += [nn.ConvTranspose2d(width, width // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(width // 2), nn.ReLU(True)]
            width //= 2
        layers += [nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z.reshape(z.shape[0], -1, 1, 1))


class DCGANDiscriminator(nn.Module):
    """D: ``images[N, C, r, r] -> logits[N]``."""

    def __init__(self, resolution, channels, ndf):
        super().__init__()
        n_down = int(math.log2(resolution)) - 2
        width = ndf
        layers = [nn.Conv2d(channels, width, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
        for _ in range(n_down - 1):
            layers += [nn.Conv2d(width, width * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(width * 2), nn.LeakyReLU(0.2, True)]
            width *= 2
        layers += [nn.Conv2d(width, 1, 4, 1, 0, bias=False)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).flatten()


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

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def build(self, resolution, channels):
        o = self.options
        return DCGANGenerator(resolution, channels, o.latent_dim, o.ngf), DCGANDiscriminator(resolution, channels, o.ndf)


@hookimpl
def register_architectures(register):
    register("dcgan", DCGAN)
