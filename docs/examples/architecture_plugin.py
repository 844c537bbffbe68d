"""Example gankit plugin: an architecture (kind ``architecture``, recipe ``[architecture]``).

``mlp``: a G and a D made of fully connected layers, for small images and tests (the MLP
networks of Goodfellow et al. 2014, "Generative Adversarial Nets", sec. 5, without maxout or
dropout). It does not grow, so use it with ``[growth] name = "static"``; a growing architecture
builds every block up front and mixes ``gan_kit.Growable`` into G and D.

Use it::

    plugins = ["architecture_plugin.py"]
    [architecture]
    name = "mlp"
    latent_dim = 64
    hidden = 256
    [growth]
    name = "static"
    batch_size = 32
"""

from __future__ import annotations

import attrs
import torch
from torch import nn

from gan_kit import Architecture, hookimpl, option


def _positive(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


class Generator(nn.Module):
    """``z[N, latent_dim] -> images[N, channels, resolution, resolution]`` in (-1, 1) (tanh)."""

    def __init__(self, latent_dim: int, hidden: int, channels: int, resolution: int):
        super().__init__()
        self.shape = (channels, resolution, resolution)
        self.net = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, channels * resolution * resolution), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z).view(z.shape[0], *self.shape)


class Discriminator(nn.Module):
    """``images[N, C, H, W] -> logits[N]`` (raw, no sigmoid: losses take logits)."""

    def __init__(self, hidden: int, channels: int, resolution: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * resolution * resolution, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(1)


class MLP(Architecture):
    """Builds ``(Generator, Discriminator)`` for the final resolution and channel count."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(64, help="Size of the latent z.", validator=_positive)
        hidden: int = option(256, help="Units of each hidden layer of G and D.", validator=_positive)

    @property
    def latent_dim(self) -> int:
        # The engine draws z[N, latent_dim] for G with this.
        return self.options.latent_dim

    def build(self, resolution: int, channels: int) -> tuple[nn.Module, nn.Module]:
        o = self.options
        return Generator(o.latent_dim, o.hidden, channels, resolution), Discriminator(o.hidden, channels, resolution)

    def batch_problem(self, batch: int, world_size: int = 1) -> str | None:
        # D looks at each image alone (no minibatch statistics), so every batch size works.
        return None


@hookimpl
def register_architectures(register):
    register("mlp", MLP)
