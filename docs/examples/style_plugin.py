"""Example gankit plugin: an architecture whose G has per-layer styles (``gan_kit.StyleGenerator``).

``style-mlp``: a small style-based G of fully connected layers - a mapping network from z to W
and a synthesis network whose every layer is modulated by its own W, with a per-layer noise
input (the StyleGAN design, Karras et al. 2019, sec. 2, on vectors instead of feature maps) -
and the MLP D of ``architecture_plugin.py``. Because G has ``mapping``, ``synthesis``,
``num_ws``, ``w_dim`` and ``w_avg``, ``gankit style-mix`` mixes its layers, ``gankit generate
--w`` draws from saved W and ``--truncation`` / ``--noise-mode`` work with it.

Use it::

    plugins = ["style_plugin.py"]
    [architecture]
    name = "style-mlp"
    latent_dim = 32
    [growth]
    name = "static"
    batch_size = 32
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import Architecture, hookimpl, option


def _positive(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


class StyleMLPGenerator(nn.Module):
    """``z[N, latent_dim] -> images[N, C, r, r]`` in (-1, 1): ``synthesis(mapping(z))``.

    ``mapping``: z normalised by its second moment, two linear layers -> W, repeated for the
    ``num_ws`` layers. ``synthesis``: a learned constant vector through ``num_ws`` linear
    layers, each scaled per feature by ``1 + affine(W of that layer)`` (its style), plus noise
    times a learned per-layer strength, then leaky ReLU; a last linear layer makes the image.
    """

    def __init__(self, latent_dim: int, w_dim: int, hidden: int, num_layers: int, channels: int, resolution: int):
        super().__init__()
        self.shape = (channels, resolution, resolution)
        self.num_ws, self.w_dim, self.w_avg_beta = num_layers, w_dim, 0.995
        self.mapping_net = nn.Sequential(nn.Linear(latent_dim, w_dim), nn.LeakyReLU(0.2), nn.Linear(w_dim, w_dim))
        self.register_buffer("w_avg", torch.zeros(w_dim))  # running mean of W: truncation's centre
        self.const = nn.Parameter(torch.randn(hidden))
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(num_layers))
        self.affines = nn.ModuleList(nn.Linear(w_dim, hidden) for _ in range(num_layers))
        self.noise_strength = nn.Parameter(torch.zeros(num_layers))
        self.register_buffer("noise_const", torch.randn(num_layers, hidden))  # noise_mode="const"
        self.to_image = nn.Linear(hidden, channels * resolution * resolution)

    def mapping(self, z, labels=None, truncation_psi=1.0):
        """``z[N, latent_dim] -> ws[N, num_ws, w_dim]``; psi != 1 pulls W toward ``w_avg``."""
        w = self.mapping_net(z * torch.rsqrt(z.square().mean(dim=1, keepdim=True) + 1e-8))
        if truncation_psi != 1:
            w = self.w_avg.lerp(w, truncation_psi)
        return w.unsqueeze(1).repeat(1, self.num_ws, 1)

    def synthesis(self, ws, noise_mode="random"):
        """``ws[N, num_ws, w_dim] -> images[N, C, r, r]``; layer i takes ``ws[:, i]``."""
        x = self.const.expand(ws.shape[0], -1)
        for i, (layer, affine) in enumerate(zip(self.layers, self.affines)):
            x = layer(x) * (1 + affine(ws[:, i]))
            if noise_mode == "random":
                x = x + self.noise_strength[i] * torch.randn_like(x)
            elif noise_mode == "const":
                x = x + self.noise_strength[i] * self.noise_const[i]
            x = F.leaky_relu(x, 0.2)
        return torch.tanh(self.to_image(x)).view(ws.shape[0], *self.shape)

    def forward(self, z):
        ws = self.mapping(z)
        if self.training:  # training keeps w_avg; mapping itself has no side effects
            with torch.no_grad():
                self.w_avg.copy_(ws[:, 0].mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        return self.synthesis(ws)


class Discriminator(nn.Module):
    """``images[N, C, H, W] -> logits[N]`` (raw, no sigmoid: losses take logits)."""

    def __init__(self, hidden: int, channels: int, resolution: int):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(channels * resolution * resolution, hidden),
                                 nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(1)


class StyleMLP(Architecture):
    """Builds ``(StyleMLPGenerator, Discriminator)`` for the final resolution and channel count."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(32, help="Size of the latent z.", validator=_positive)
        w_dim: int = option(32, help="Size of W, the output of the mapping network.", validator=_positive)
        hidden: int = option(64, help="Units of each synthesis layer and of D's hidden layer.", validator=_positive)
        num_layers: int = option(4, help="Synthesis layers, each with its own W (num_ws).", validator=_positive)

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def build(self, resolution: int, channels: int) -> tuple[nn.Module, nn.Module]:
        o = self.options
        G = StyleMLPGenerator(o.latent_dim, o.w_dim, o.hidden, o.num_layers, channels, resolution)
        return G, Discriminator(o.hidden, channels, resolution)


@hookimpl
def register_architectures(register):
    register("style-mlp", StyleMLP)
