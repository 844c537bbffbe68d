"""Example gankit plugin: a projected discriminator on a frozen pretrained feature network
(kind ``architecture``), written only against the public ``gan_kit`` API.

``projected``: D looks at images through a fixed feature network loaded from a local weights
file, as in Projected GANs (Sauer et al. 2021, "Projected GANs Converge Faster", sec. 3): the
features of two scales are mixed by fixed random 1x1 convolutions (their cross-channel mixing)
and judged by small trainable heads, whose logits are summed. Only the heads (and G) train.

What the example shows:

* ``gan_kit.load_frozen(module, path)`` fills the feature network from ``features`` (a file
  written by ``torch.save(net.state_dict(), path)``) and freezes it: the recipe's ``[init]`` and
  spectral norm leave it alone, no optimizer steps it, and checkpoints record the file by path
  and SHA-256 instead of copying its tensors (a resume with a changed file stops in one line).
* The random mixing convolutions are frozen another way, ``requires_grad_(False)``: they are
  not from a file, so checkpoints keep them.
* ``feature_noise``, an option of its own declared ``schedulable=True``: Gaussian instance noise
  on the features (Sonderby et al. 2017, "Amortised MAP inference for image super-resolution",
  sec. 3.1), usually annealed to 0 over training. The architecture's ``set_option`` pushes each
  scheduled value into a buffer of D (``fill_``: no host sync, and no recompile under
  ``torch.compile``).

``save_random_features(path, channels)`` writes random weights of the feature network, to try
the plugin (and test it) without a pretrained one.

Use it::

    plugins = ["projected_plugin.py"]
    [architecture]
    name = "projected"
    features = "features.pt"        # relative to the recipe's folder
    feature_noise = { schedule = "linear", start = 0.5, end = 0.0, kimg = 50 }
    [growth]
    name = "static"
    batch_size = 32
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from gan_kit import Architecture, batch_randn, hookimpl, load_frozen, option


class FeatureNet(nn.Module):
    """The "pretrained" network: ``images[N, C, r, r] -> (f1[N, 16, r, r], f2[N, 32, r/2, r/2])``."""

    def __init__(self, channels: int):
        super().__init__()
        self.stage1 = nn.Sequential(nn.Conv2d(channels, 16, 3, padding=1), nn.LeakyReLU(0.2))
        self.stage2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.LeakyReLU(0.2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.stage1(x)
        return f1, self.stage2(f1)


def save_random_features(path: str | Path, channels: int, seed: int = 0) -> Path:
    """Write random weights of ``FeatureNet(channels)`` to ``path`` (a stand-in for a pretrained
    network); returns the path."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG where it was
        torch.manual_seed(seed)
        torch.save(FeatureNet(channels).state_dict(), path)
    return Path(path)


class ProjectedD(nn.Module):
    """``images[N, C, r, r] -> logits[N]``: frozen features, frozen random mixing, trainable heads."""

    def __init__(self, features: FeatureNet, width: int):
        super().__init__()
        self.features = features
        self.mix = nn.ModuleList([nn.Conv2d(16, width, 1), nn.Conv2d(32, width, 1)]).requires_grad_(False)
        self.heads = nn.ModuleList([
            nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(width, 1, 1))
            for _ in range(2)])
        # The scheduled instance-noise std, a buffer so a compiled forward reads a tensor, not a float.
        self.register_buffer("noise_std", torch.zeros(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x.new_zeros(x.shape[0])
        for f, mix, head in zip(self.features(x), self.mix, self.heads):
            # batch_randn draws for the global batch and slices, so N processes match one.
            f = f + self.noise_std * batch_randn(f.shape[0], *f.shape[1:], device=f.device)
            logits = logits + head(mix(f)).mean(dim=(1, 2, 3))
        return logits


class Generator(nn.Module):
    """``z[N, latent_dim] -> images[N, C, r, r]`` in (-1, 1): a 4x4 start, then upsampling convs."""

    def __init__(self, latent_dim: int, width: int, channels: int, resolution: int):
        super().__init__()
        self.width = width
        self.fc = nn.Linear(latent_dim, width * 16)
        blocks = []
        size = 4
        while size < resolution:
            blocks += [nn.Upsample(scale_factor=2), nn.Conv2d(width, width, 3, padding=1), nn.LeakyReLU(0.2)]
            size *= 2
        self.blocks = nn.Sequential(*blocks)
        self.to_rgb = nn.Conv2d(width, channels, 1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.fc(z).view(z.shape[0], self.width, 4, 4)
        return torch.tanh(self.to_rgb(self.blocks(x)))


class Projected(Architecture):
    """A conv G and a projected D on a frozen feature network loaded from ``features``."""

    @attrs.frozen
    class Options:
        features: str = option(help="Weights file of the frozen feature network (torch.save of its state_dict); "
                                    "relative to the recipe's folder.", path=True)
        latent_dim: int = option(64, help="Size of the latent z.", min=1)
        width: int = option(32, help="Channels of G's layers and of D's mixing convolutions and heads.", min=1)
        feature_noise: float = option(0.0, help="Std of the Gaussian instance noise added to the features D's heads "
                                                "see (0 = none).", min=0, schedulable=True)

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def build(self, resolution: int, channels: int) -> tuple[nn.Module, nn.Module]:
        o = self.options
        # Frozen (and kept in eval mode), recorded by path and digest, never copied into checkpoints.
        features = load_frozen(FeatureNet(channels), o.features)
        self.D = ProjectedD(features, o.width)
        self.D.noise_std.fill_(o.feature_noise)
        return Generator(o.latent_dim, o.width, channels, resolution), self.D

    def set_option(self, name: str, value: Any) -> None:
        # Called before every iteration with a scheduled option's value.
        self.options = attrs.evolve(self.options, **{name: value})
        if name == "feature_noise":
            self.D.noise_std.fill_(value)  # an asynchronous device copy, never a host sync

    def batch_problem(self, batch: int, world_size: int = 1) -> str | None:
        return None  # every layer is per sample


@hookimpl
def register_architectures(register):
    register("projected", Projected)
