"""Example gankit plugin: a weight initializer (kind ``init``, recipe ``[init]``).

``lecun-normal``: weights ~ N(0, gain^2 / fan_in), biases zero (LeCun et al. 1998, "Efficient
BackProp", sec. 4.6). It finds the layers with ``gan_kit.weight_layers`` and their fan-in with
``gan_kit.fan_in``, and honours a per-layer gain an architecture set with
``gan_kit.set_init_gain`` (read back with ``gan_kit.init_gain``).

Use it::

    plugins = ["initializer_plugin.py"]
    [init]
    name = "lecun-normal"
    gain = 1.0
"""

from __future__ import annotations

import math

import attrs
import torch
from torch import nn

from gan_kit import Initializer, fan_in, hookimpl, init_gain, option, weight_layers


class LeCunNormal(Initializer):
    """Every conv, transposed conv and linear layer: ``weight ~ N(0, (gain / sqrt(fan_in))^2)``, ``bias = 0``."""

    @attrs.frozen
    class Options:
        gain: float = option(1.0, help="Default gain (std x sqrt(fan_in)); a layer's own set_init_gain wins.",
                             validator=lambda v: None if v > 0 else f"must be > 0, got {v} (e.g. gain = 1.0)")

    @torch.no_grad()
    def apply(self, module: nn.Module) -> None:
        for layer in weight_layers(module):
            std = init_gain(layer, self.options.gain) / math.sqrt(fan_in(layer))
            nn.init.normal_(layer.weight, 0.0, std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


@hookimpl
def register_initializers(register):
    register("lecun-normal", LeCunNormal)
