"""BigGAN (Brock et al. 2019, "Large Scale GAN Training for High Fidelity Natural Image
Synthesis", sec. 3 and appendix B) as StudioGAN builds it (PyTorch-StudioGAN
``src/models/big_resnet.py``): the ``biggan`` architecture.

G: z split into ``blocks + 1`` equal chunks (hierarchical latent, sec. 3 / fig. 15a): the first
is mapped linearly to ``[N, m0 * g_conv_dim, 4, 4]``, and block i's conditional batch norms
(``ConditionalBatchNorm2d``) read ``[shared(y), z chunk i + 1]``, ``shared`` one class embedding
(``shared_dim`` wide) that every block shares; the residual up-blocks, self-attention, last BN,
ReLU, conv and tanh are ``sngan-resnet``'s, spectral norm on every G weight layer (the cBN maps
included; not on the shared embedding). D: ``sngan-resnet``'s (spectrally normalised residual
down-blocks, projection head; ``D.features`` / ``D.head``). Widths per block from StudioGAN's
tables times ``g_conv_dim`` / ``d_conv_dim`` (``*_channel_multipliers`` override them).
Unconditional: each block's cBN reads its z chunk alone.
"""

from __future__ import annotations

import attrs
import torch
from torch import nn

from gan_kit import option
from gan_kit.builtin.architectures.conditioning import check_labels
from gan_kit.builtin.architectures.studiogan.layers import (D_MULTIPLIERS, G_MULTIPLIERS, SelfAttention,
                                                            spectral_norm)
from gan_kit.builtin.architectures.studiogan.resnet import (BN_EPS, GBlock, ResNetGANArchitecture, g_synthesis,
                                                            g_widths, multipliers_help, resnet_problems)

__all__ = ["BigGANGenerator", "BigGAN"]


class BigGANGenerator(nn.Module):
    """BigGAN's G: ``z[N, latent_dim] -> images[N, channels, r, r]`` in (-1, 1), ``G(z, labels[N])``
    when ``num_classes`` > 0. ``widths``: channels at each block boundary, 4 px first;
    ``latent_dim`` must be a multiple of the blocks + 1 (the chunks, ``chunk`` each)."""

    def __init__(self, resolution: int, channels: int, latent_dim: int, shared_dim: int, widths: list[int],
                 attention: tuple[int, ...] = (), sn: bool = True, num_classes: int = 0):
        super().__init__()
        chunks = len(widths)
        if latent_dim % chunks:
            raise ValueError(f"latent_dim {latent_dim} does not split into {chunks} equal chunks")
        self.resolution, self.latent_dim, self.num_classes, self.width = resolution, latent_dim, num_classes, widths[0]
        self.chunk = latent_dim // chunks
        self.linear = spectral_norm(nn.Linear(self.chunk, widths[0] * 16), sn)
        self.shared = None
        if num_classes:
            self.shared = nn.Embedding(num_classes, shared_dim)
            nn.init.orthogonal_(self.shared.weight)  # StudioGAN's default "ortho" init
        cond_dim = self.chunk + (shared_dim if num_classes else 0)
        blocks: list[nn.Module] = []
        for i in range(chunks - 1):
            blocks.append(GBlock(widths[i], widths[i + 1], cond_dim, sn))
            if i + 1 in attention:
                blocks.append(SelfAttention(widths[i + 1], sn))
        self.blocks = nn.ModuleList(blocks)
        self.bn = nn.BatchNorm2d(widths[-1], eps=BN_EPS)
        self.to_rgb = spectral_norm(nn.Conv2d(widths[-1], channels, 3, padding=1), sn)

    def conditions(self, z: torch.Tensor, labels: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(z chunk 0, [cBN input of each block])``: ``[shared(labels), z chunk i + 1]``."""
        zs = torch.split(z, self.chunk, dim=1)
        if self.shared is None:
            return zs[0], list(zs[1:])
        s = self.shared(labels).to(z.dtype)
        return zs[0], [torch.cat([s, c], dim=1) for c in zs[1:]]

    def forward(self, z, labels=None):
        check_labels(self, self.num_classes, labels, z.shape[0])
        z0, ys = self.conditions(z, labels)
        return g_synthesis(self, self.linear(z0).view(-1, self.width, 4, 4), ys)


class BigGAN(ResNetGANArchitecture):
    """BigGAN as StudioGAN builds it: shared class embedding, hierarchical z, cBN of [embedding, z chunk], spectral norm in G and D, self-attention, projection D; static resolution."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(80, help="Size of the latent z, split into (G blocks + 1) equal chunks (StudioGAN's "
                                          "CIFAR-10 BigGAN: 80 = 4 x 20).", min=1, max=4096)
        shared_dim: int = option(128, help="Width of G's shared class embedding (g_shared_dim: 128).", min=1,
                                 max=4096)
        g_conv_dim: int = option(96, help="G's base width (StudioGAN's CIFAR-10 BigGAN: 96).", min=1, max=4096)
        d_conv_dim: int = option(96, help="D's base width (CIFAR-10 BigGAN: 96).", min=1, max=4096)
        g_channel_multipliers: tuple[int, ...] = option((), help=multipliers_help("G", G_MULTIPLIERS), min=1,
                                                        max=64)
        d_channel_multipliers: tuple[int, ...] = option((), help=multipliers_help("D", D_MULTIPLIERS), min=1,
                                                        max=64)
        g_attention: tuple[int, ...] = option((2,), help="G blocks (1-based) followed by self-attention "
                                                         "(attn_g_loc; CIFAR-10 BigGAN: 2). Empty: none.", min=1,
                                              max=16)
        d_attention: tuple[int, ...] = option((1,), help="D blocks (1-based, input side first) followed by "
                                                         "self-attention (attn_d_loc; CIFAR-10 BigGAN: 1). Empty: none.",
                                              min=1, max=16)
        g_spectral_norm: bool = option(True, help="Spectral norm on every G conv / linear layer, the cBN maps "
                                                  "included (apply_g_sn; BigGAN: true).")
        d_spectral_norm: bool = option(True, help="Spectral norm on every D layer (apply_d_sn; BigGAN: true); "
                                                  "false puts batch norm in D's blocks.")

    @classmethod
    def problems(cls, o, recipe):
        yield from resnet_problems(o, recipe, "biggan")
        chunks = len(G_MULTIPLIERS.get(recipe.resolution, ()))  # G's blocks + 1 at a resolution StudioGAN defines
        if chunks and o.latent_dim >= 1 and o.latent_dim % chunks:
            yield "latent_dim", (f"{o.latent_dim} does not split into {chunks} equal chunks (G's {chunks - 1} "
                                 f"blocks + 1 at {recipe.resolution} px); use a multiple of {chunks}")

    def build(self, resolution, channels):
        o, k = self.options, self.context.num_classes
        G = BigGANGenerator(resolution, channels, o.latent_dim, o.shared_dim,
                            g_widths(resolution, o.g_conv_dim, o.g_channel_multipliers), tuple(o.g_attention),
                            o.g_spectral_norm, num_classes=k)
        return G, self.discriminator(resolution, channels)

