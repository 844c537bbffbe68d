"""Weight initializers, applicable to any architecture: each visits every Conv/ConvTranspose/
Linear layer of a module. Biases are set to zero.

An architecture may give a layer its own gain with ``gan_kit.set_init_gain`` (PGGAN's toRGB
layers and D's output use gain 1); gain-aware initializers read it with ``gan_kit.init_gain``.
"""

from __future__ import annotations

import math
from typing import Literal

import attrs
import torch
from torch import nn
from torch.nn.utils import parametrize

from gan_kit import Initializer, fan_in, hookimpl, init_gain, option, weight_layers
from gan_kit.base.layers import weight_of

layers = weight_layers
_weight = weight_of


def _zero_bias(layer: nn.Module) -> None:
    if getattr(layer, "bias", None) is not None:
        nn.init.zeros_(layer.bias)


class Normal(Initializer):
    """N(mean, std^2) weights (DCGAN, Radford et al. 2016, sec. 4: std 0.02)."""

    @attrs.frozen
    class Options:
        std: float = option(0.02, help="Standard deviation of the weights.", min=0, max=100)
        mean: float = option(0.0, help="Mean of the weights.", min=-100, max=100)

    @torch.no_grad()
    def apply(self, module):
        for layer in layers(module):
            _weight(layer).normal_(self.options.mean, self.options.std)
            _zero_bias(layer)


class Xavier(Initializer):
    """Glorot/Xavier (Glorot & Bengio 2010): variance gain^2 * 2 / (fan_in + fan_out)."""

    @attrs.frozen
    class Options:
        gain: float = option(1.0, help="Gain multiplying the standard deviation.", min=0, max=100)
        distribution: Literal["normal", "uniform"] = option("normal", help='"normal" or "uniform".')

    @torch.no_grad()
    def apply(self, module):
        fn = nn.init.xavier_normal_ if self.options.distribution == "normal" else nn.init.xavier_uniform_
        for layer in layers(module):
            fn(_weight(layer), gain=self.options.gain)
            _zero_bias(layer)


class Kaiming(Initializer):
    """He/Kaiming (He et al. 2015): std = gain / sqrt(fan_in), gain from the nonlinearity."""

    @attrs.frozen
    class Options:
        nonlinearity: Literal["relu", "leaky_relu", "linear", "tanh", "sigmoid"] = option(
            "leaky_relu", help="Nonlinearity after the layer, which sets the gain.")
        negative_slope: float = option(0.2, help="Negative slope of leaky_relu (PGGAN/DCGAN use 0.2).",
                                      min=0, max=1)
        mode: Literal["fan_in", "fan_out"] = option("fan_in", help="Preserve variance forward (fan_in) or backward.")

    @torch.no_grad()
    def apply(self, module):
        o = self.options
        for layer in layers(module):
            nn.init.kaiming_normal_(_weight(layer), a=o.negative_slope, mode=o.mode, nonlinearity=o.nonlinearity)
            _zero_bias(layer)


class Orthogonal(Initializer):
    """Orthogonal weights (Saxe et al. 2014): the flattened weight has orthonormal rows or columns, times gain."""

    @attrs.frozen
    class Options:
        gain: float = option(1.0, help="Scale of the orthogonal matrix.", min=0, max=100)

    @torch.no_grad()
    def apply(self, module):
        for layer in layers(module):
            nn.init.orthogonal_(_weight(layer), gain=self.options.gain)
            _zero_bias(layer)


class RuntimeScale(nn.Module):
    """Parametrization ``W -> W * scale``: the stored weight stays N(0, 1), the scale applies on
    every forward (PGGAN sec. 4.1), so Adam's per-parameter step is equal for every layer."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale:.6g}"


class EqualizedLR(Initializer):
    """Equalized learning rate (Karras et al. 2018, sec. 4.1): N(0,1) weights scaled by gain/sqrt(fan_in) on every forward; bias unscaled."""

    @attrs.frozen
    class Options:
        gain: float = option(math.sqrt(2.0), help="He gain for layers without their own gain (gan_kit.set_init_gain; "
                                                  "sqrt 2 for leaky ReLU, as in PGGAN).", min=0, min_exclusive=True,
                                  max=100)

    @torch.no_grad()
    def apply(self, module):
        for layer in layers(module):
            if parametrize.is_parametrized(layer, "weight"):
                continue  # already equalized (or otherwise parametrized): leave it alone
            gain = init_gain(layer, self.options.gain)
            layer.weight.normal_(0.0, 1.0)
            _zero_bias(layer)
            parametrize.register_parametrization(layer, "weight", RuntimeScale(gain / math.sqrt(fan_in(layer))))


class NoInit(Initializer):
    """Leaves every layer as the architecture built it: for architectures that initialise
    themselves (R3GAN's fix-up init), where any other initializer would overwrite that."""

    def apply(self, module):
        return None


@hookimpl
def register_initializers(register):
    register("normal", Normal)
    register("xavier", Xavier)
    register("kaiming", Kaiming)
    register("orthogonal", Orthogonal)
    register("equalized-lr", EqualizedLR)
    register("none", NoInit)
