"""Helpers for initializers and architectures: which layers hold weights, their fan-in, and the
per-layer gain an architecture may ask an initializer to use."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parametrize

__all__ = ["WEIGHT_LAYERS", "weight_layers", "weight_of", "fan_in", "set_init_gain", "init_gain"]

#: Layer types whose ``weight`` an initializer sets.
WEIGHT_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
                 nn.Linear)

_GAIN = "_gankit_init_gain"


def weight_layers(module: nn.Module) -> list[nn.Module]:
    """Every convolution, transposed convolution and linear layer of ``module`` (itself included)."""
    return [m for m in module.modules() if isinstance(m, WEIGHT_LAYERS)]


def weight_of(layer: nn.Module) -> torch.Tensor:
    """The stored weight of ``layer`` (the original under a parametrization such as equalized lr)."""
    if parametrize.is_parametrized(layer, "weight"):
        return layer.parametrizations.weight.original
    return layer.weight


def fan_in(layer: nn.Module) -> int:
    """Inputs feeding one output unit: in_features for Linear, in_channels * prod(kernel) for
    Conv, in_channels * prod(kernel) / prod(stride) for ConvTranspose (inputs per output pixel)."""
    w = weight_of(layer)
    if isinstance(layer, nn.Linear):
        return w.shape[1]
    receptive = math.prod(w.shape[2:])
    if isinstance(layer, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return max(1, int(w.shape[0] * receptive / math.prod(layer.stride)))
    return w.shape[1] * receptive


def set_init_gain(layer: nn.Module, gain: float) -> nn.Module:
    """Ask gain-aware initializers (``equalized-lr``) to use ``gain`` for this layer instead of
    their default (e.g. 1 for PGGAN's toRGB layers, Karras et al. 2018, appendix A.1). Returns
    the layer."""
    setattr(layer, _GAIN, float(gain))
    return layer


def init_gain(layer: nn.Module, default: float) -> float:
    """The gain ``set_init_gain`` gave ``layer``, else ``default``."""
    return float(getattr(layer, _GAIN, default))
