"""StyleGAN3 (Karras et al. 2021, "Alias-Free Generative Adversarial Networks",
arXiv:2106.12423): the ``stylegan3`` architecture, configs T and R.

G = StyleGAN2's mapping network + the alias-free synthesis network: Fourier-feature input
(``synthesis_input``), layers of modulated convolution and filtered leaky ReLU
(``synthesis_layer``, ``filtered_lrelu``) whose Kaiser low-pass filters (``filters``) follow the
cutoff / stopband / sampling-rate schedule (``schedule``). D = StyleGAN2's residual D. Pure
PyTorch: the math of the paper's code's reference paths (``filtered_lrelu`` ref, ``upfirdn2d`` ref),
checked against it in tests/test_stylegan3_parity.py.
"""

from __future__ import annotations

from gan_kit import hookimpl
from gan_kit.builtin.architectures.stylegan3.filtered_lrelu import filtered_lrelu, upfirdn2d
from gan_kit.builtin.architectures.stylegan3.filters import kaiser_beta, lowpass_filter
from gan_kit.builtin.architectures.stylegan3.networks import Generator, StyleGAN3, SynthesisNetwork
from gan_kit.builtin.architectures.stylegan3.schedule import LayerSpec, layer_schedule
from gan_kit.builtin.architectures.stylegan3.synthesis_input import SynthesisInput, user_transform
from gan_kit.builtin.architectures.stylegan3.synthesis_layer import ModConv, SynthesisLayer, modulated_conv2d

__all__ = ["StyleGAN3", "Generator", "SynthesisNetwork", "SynthesisInput", "SynthesisLayer", "LayerSpec",
           "layer_schedule", "lowpass_filter", "kaiser_beta", "filtered_lrelu", "upfirdn2d", "modulated_conv2d", "user_transform",
           "ModConv"]


@hookimpl
def register_architectures(register):
    register("stylegan3", StyleGAN3)
