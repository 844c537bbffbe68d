"""StyleGAN2 (Karras et al. 2020, "Analyzing and Improving the Image Quality of StyleGAN",
arXiv:1912.04958): the ``stylegan2`` architecture and the ``path-length`` G penalty.

G = mapping network (z -> W, sec. 2 of StyleGAN, Karras et al. 2019) + skip-architecture
synthesis network (StyleGAN2 sec. 4.1, fig. 7a) built from modulated 3x3 convolutions with
weight demodulation (sec. 2.2, eq. 1-3) and per-pixel noise. D = residual network (sec. 4.1,
fig. 7c) ending in minibatch standard deviation (PGGAN sec. 3) and two FC layers. Up- and
downsampling use the [1, 3, 3, 1] FIR filter as the paper's code does (``fir``: upfirdn2d in
plain PyTorch), or bilinear resampling (``resample = "bilinear"``). Class-conditional as
stylegan2-ada-pytorch (Karras et al. 2020b): the label joined to z in the mapping network, D's
logit projected on a label mapping. The other architectures of sec. 4.1 (G "orig" / "resnet", D
"orig" / "skip"), several minibatch-stddev maps and truncation of the first Ws only are options,
with stylegan2-ada-pytorch's semantics, so its snapshots import exactly.

Choices that differ from the paper's code (all documented in docs/architectures.md):

* Every layer applies its equalized-learning-rate scale itself (PGGAN sec. 4.1; StyleGAN2 keeps
  it): the stored weight is N(0, 1) / lr_mult and the forward uses ``weight * lr_mult /
  sqrt(fan_in)``. The layers hold raw Parameters (not nn.Linear / nn.Conv2d), so a recipe
  initializer finds nothing to change; the architecture accepts only ``[init] name =
  "equalized-lr"`` (the default), which its layers already implement.
* Activations are leaky ReLU (slope 0.2) times sqrt(2) (the gain sits on the activation, as in
  the official code, not in the weights).
"""

from __future__ import annotations

from gan_kit import hookimpl
from gan_kit.builtin.architectures.stylegan2.layers import (EqualizedConv2d, EqualizedLinear, ModulatedConv, NoiseMode,
                                              modulated_conv2d, modulated_conv2d_naive, modulated_conv2d_scaled)
from gan_kit.builtin.architectures.stylegan2.networks import DBlock, Discriminator, Generator, MappingNetwork, StyleGAN2
from gan_kit.builtin.architectures.stylegan2.path_length import PathLength

__all__ = [
    "StyleGAN2",
    "PathLength",
    "Generator",
    "Discriminator",
    "MappingNetwork",
    "DBlock",
    "NoiseMode",
    "ModulatedConv",
    "EqualizedLinear",
    "EqualizedConv2d",
    "modulated_conv2d",
    "modulated_conv2d_naive",
    "modulated_conv2d_scaled",
]


@hookimpl
def register_architectures(register):
    register("stylegan2", StyleGAN2)


@hookimpl
def register_penalties(register):
    register("path-length", PathLength)
