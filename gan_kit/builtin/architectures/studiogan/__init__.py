"""StudioGAN's class-conditional ResNet GANs (Kang et al., PyTorch-StudioGAN, MIT licence; written
from its definitions, not copied): ``sngan-resnet`` and its preset ``sagan`` (``resnet``),
``biggan`` (``biggan``), on the layers of ``layers`` (spectral norm, self-attention, the channel
tables) and ``conditioning.ConditionalBatchNorm2d``. Differences from StudioGAN's code are listed
in docs/architectures.md."""

from __future__ import annotations

from gan_kit import hookimpl
from gan_kit.builtin.architectures.studiogan.biggan import BigGAN, BigGANGenerator
from gan_kit.builtin.architectures.studiogan.layers import SelfAttention, SpectralNorm, spectral_norm
from gan_kit.builtin.architectures.studiogan.resnet import SAGAN, DBlock, Discriminator, GBlock, Generator, SNGANResNet

__all__ = ["SNGANResNet", "SAGAN", "BigGAN", "Generator", "BigGANGenerator", "Discriminator", "GBlock", "DBlock",
           "SelfAttention", "SpectralNorm", "spectral_norm"]


@hookimpl
def register_architectures(register):
    register("sngan-resnet", SNGANResNet)
    register("sagan", SAGAN)
    register("biggan", BigGAN)
