"""A StyleGAN3 synthesis layer (Karras et al. 2021, arXiv:2106.12423, sec. 3.2, fig. 4b,
appendix F.1): modulated convolution of the input divided by its running RMS magnitude, then the
filtered leaky ReLU between the layer's sampling rates."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import mean_over_processes
from gan_kit.builtin.architectures.stylegan2.layers import EqualizedLinear
from gan_kit.builtin.architectures.stylegan3.filtered_lrelu import filtered_lrelu, lrelu_matrices
from gan_kit.builtin.architectures.stylegan3.filters import lowpass_filter
from gan_kit.builtin.architectures.stylegan3.schedule import LayerSpec

__all__ = ["SynthesisLayer", "modulated_conv2d", "ModConv"]

#: How the modulated convolution is computed (the same formula): see ``modulated_conv2d``.
ModConv = Literal["grouped", "scaled"]


def modulated_conv2d(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool,
                     padding: int, input_gain: torch.Tensor | None = None, modconv: ModConv = "grouped") -> torch.Tensor:
    """StyleGAN2's modulated convolution (Karras et al. 2020, sec. 2.2, eq. 1-3) as StyleGAN3 uses
    it: ``x[N, Cin, H, W]``, ``weight[Cout, Cin, k, k]``, ``styles[N, Cin]``; with ``demodulate``
    the weight (per output channel) and the styles (all together) are first divided by their RMS,
    which demodulation cancels but which keeps fp16 in range; ``input_gain`` (a scalar tensor)
    multiplies the modulated weight, i.e. the input. ``padding`` zeros on each side. Returns
    ``[N, Cout, H + 2 padding - k + 1, ...]``. ``modconv``: "grouped" (one convolution with
    ``groups=N`` of the per-sample weights, the paper's code's form) or "scaled" (the input times
    the styles, one convolution with the shared weight, the output times the demodulation
    coefficients: the same sums in another order, and a graph whose batch size stays free for
    export). Either way a 1x1 kernel without padding runs as a matrix product per sample."""
    n, cin, h, w_ = x.shape
    cout, _, kh, kw = weight.shape
    if demodulate:
        weight = weight * weight.square().mean(dim=(1, 2, 3), keepdim=True).rsqrt()
        styles = styles * styles.square().mean().rsqrt()
    # A 1x1 kernel without padding is a matrix product per sample: one (batched) matmul, not a
    # convolution (a grouped 1x1 convolution runs as N small convolutions on the CPU).
    pointwise = kh == kw == 1 and padding == 0
    if modconv == "scaled":
        scale = styles if input_gain is None else styles * input_gain
        x = x * scale.to(x.dtype).reshape(n, cin, 1, 1)
        if pointwise:
            out = (weight.reshape(cout, cin).to(x.dtype) @ x.reshape(n, cin, h * w_)).reshape(n, cout, h, w_)
        else:
            out = F.conv2d(x, weight.to(x.dtype), padding=padding)
        if demodulate:
            dcoefs = (styles.square() @ weight.square().sum(dim=(2, 3)).t() + 1e-8).rsqrt()
            out = out * dcoefs.to(x.dtype).reshape(n, cout, 1, 1)
        return out
    w = weight.unsqueeze(0) * styles.reshape(n, 1, cin, 1, 1)
    if demodulate:
        w = w * (w.square().sum(dim=(2, 3, 4), keepdim=True) + 1e-8).rsqrt()
    if input_gain is not None:
        w = w * input_gain
    if pointwise:
        return torch.bmm(w.reshape(n, cout, cin).to(x.dtype), x.reshape(n, cin, h * w_)).reshape(n, cout, h, w_)
    out = F.conv2d(x.reshape(1, n * cin, h, w_), w.reshape(n * cout, cin, kh, kw).to(x.dtype), padding=padding,
                   groups=n)
    return out.reshape(n, cout, out.shape[2], out.shape[3])


class SynthesisLayer(nn.Module):
    """``x[N, in_channels, in_size, in_size], w[N, w_dim] -> [N, out_channels, out_size,
    out_size]`` for the layer ``spec`` (``schedule.LayerSpec``).

    The input is divided by ``sqrt(magnitude_ema)`` (buffer, scalar: the running mean of the
    input's square, updated by a forward with ``update_emas`` as ``lerp(mean(x^2), ema,
    magnitude_ema_beta)``, over the global batch under several processes). Styles = affine(w)
    (bias initialised to 1); ToRGB divides them by ``sqrt(in_channels * k^2)`` and does not
    demodulate. The convolution (``conv_kernel``, ToRGB 1x1) pads ``k - 1`` on each side; then
    ``filtered_lrelu`` with the layer's Kaiser filters (non-persistent buffers ``up_filter``,
    ``down_filter``, None for 1 tap; their resampling matrices ``up_x``, ``up_y``, ``down_x``,
    ``down_y`` from ``lrelu_matrices``, non-persistent too, ``down_*`` None for a radial filter),
    gain sqrt(2) and slope 0.2 (ToRGB: linear, gain 1), and the output clamped to ``conv_clamp``
    (None: not clamped). ``modconv``: see ``modulated_conv2d``."""

    def __init__(self, spec: LayerSpec, w_dim: int, *, filter_size: int = 6, conv_clamp: float | None = 256.0,
                 magnitude_ema_beta: float = 0.999, modconv: ModConv = "grouped"):
        super().__init__()
        self.spec = spec
        self.modconv = modconv
        self.conv_clamp = None if conv_clamp is None else float(conv_clamp)
        self.magnitude_ema_beta = float(magnitude_ema_beta)
        k = spec.conv_kernel
        self.affine = EqualizedLinear(w_dim, spec.in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(spec.out_channels, spec.in_channels, k, k))
        self.bias = nn.Parameter(torch.zeros(spec.out_channels))
        self.register_buffer("magnitude_ema", torch.ones(()))
        up = lowpass_filter(spec.up_taps, spec.in_cutoff, spec.in_half_width * 2, spec.tmp_sampling_rate)
        down = lowpass_filter(spec.down_taps, spec.out_cutoff, spec.out_half_width * 2, spec.tmp_sampling_rate,
                              radial=spec.down_radial)
        # Constants of the architecture (they follow from the options): not in checkpoints.
        self.register_buffer("up_filter", up, persistent=False)
        self.register_buffer("down_filter", down, persistent=False)
        self.gain = 1.0 if spec.is_torgb else math.sqrt(2.0)
        self.slope = 1.0 if spec.is_torgb else 0.2
        # The filtered leaky ReLU's resampling matrices for this layer's fixed sizes (built once).
        conv_size = spec.in_size + spec.conv_kernel - 1
        mats = lrelu_matrices(up, down, (conv_size, conv_size), up=spec.up_factor, down=spec.down_factor,
                              padding=spec.padding, gain=self.gain)
        for name, m in zip(("up_x", "up_y", "down_x", "down_y"), mats or (None,) * 4):
            self.register_buffer(name, m, persistent=False)

    def forward(self, x: torch.Tensor, w: torch.Tensor, update_emas: bool = False) -> torch.Tensor:
        s = self.spec
        if update_emas:
            with torch.no_grad():
                magnitude = mean_over_processes(x.detach().float().square().mean())
                self.magnitude_ema.copy_(magnitude.lerp(self.magnitude_ema, self.magnitude_ema_beta))
        styles = self.affine(w)
        if s.is_torgb:
            styles = styles * (1.0 / math.sqrt(s.in_channels * s.conv_kernel ** 2))
        x = modulated_conv2d(x, self.weight, styles, padding=s.conv_kernel - 1, demodulate=not s.is_torgb,
                             input_gain=self.magnitude_ema.rsqrt(), modconv=self.modconv)
        return filtered_lrelu(x, self.up_filter, self.down_filter, self.bias, up=s.up_factor, down=s.down_factor,
                              padding=s.padding, gain=self.gain, slope=self.slope, clamp=self.conv_clamp,
                              matrices=None if self.up_x is None else (self.up_x, self.up_y, self.down_x, self.down_y))

    def extra_repr(self):
        s = self.spec
        return (f"{s.in_size}->{s.out_size}, {s.in_channels}->{s.out_channels}, rate {s.in_sampling_rate}->"
                f"{s.out_sampling_rate} (x{s.up_factor}/{s.down_factor}), cutoff {s.in_cutoff:g}->{s.out_cutoff:g}"
                f"{', torgb' if s.is_torgb else ''}{', critical' if s.is_critically_sampled else ''}")
