"""StyleGAN2 layers: equalized-learning-rate linear and conv layers, and the modulated
convolution with weight demodulation (Karras et al. 2020, arXiv:1912.04958, sec. 2.2, eq. 1-3).

Resampling (``resample``): ``"fir"`` - the [1, 3, 3, 1] FIR filter of the paper's code
(``fir.conv2d_resample``: a transposed convolution then the filter up, the filter then a strided
convolution down) - or ``"bilinear"`` (``F.interpolate`` up before the convolution, a 2x2 box
filter after it down).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import batch_randn
from gan_kit.builtin.architectures.stylegan2.fir import conv2d_resample, setup_filter

__all__ = ["EqualizedLinear", "EqualizedConv2d", "ModulatedConv", "NoiseMode", "modulated_conv2d",
           "modulated_conv2d_naive", "modulated_conv2d_scaled"]

_ACT_GAIN = math.sqrt(2.0)
NoiseMode = Literal["random", "const", "none"]
Resample = Literal["fir", "bilinear"]


def _lrelu(x: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
    # He gain on the activation (official StyleGAN2 code) keeps unit variance through the layer;
    # a layer's extra gain joins it in one product, so fp16 rounds as the official bias_act does.
    return F.leaky_relu(x, 0.2) * (_ACT_GAIN * gain)


def _act(x: torch.Tensor, activation: bool, gain: float, clamp: float | None) -> torch.Tensor:
    """A layer's output after its bias: leaky ReLU (or none) times ``gain`` (with the He gain of
    the activation), clamped to [-clamp * gain, +clamp * gain] (stylegan2-ada-pytorch's
    ``bias_act(..., gain=, clamp=)``: a layer's ``gain`` scales its clamp too)."""
    if activation:
        x = _lrelu(x, gain)
    elif gain != 1:
        x = x * gain
    return _clamp(x, None if clamp is None else clamp * gain)


def _clamp(x: torch.Tensor, clamp: float | None) -> torch.Tensor:
    """``x`` clamped to [-clamp, +clamp] (None: ``x`` itself, the same tensor): a layer's output
    after bias, activation and gain, as stylegan2-ada-pytorch's ``bias_act(..., clamp=)``
    (Karras et al. 2020b), so fp16 activations stay far from fp16's 65504."""
    return x if clamp is None else x.clamp(-clamp, clamp)


# ---------------------------------------------------------------------------- equalized layers --


class EqualizedLinear(nn.Module):
    """Fully connected layer with equalized learning rate and a learning-rate multiplier.

    ``x[N, in_features] -> [N, out_features]``. Stored weight ~ N(0, 1) / lr_mult, used as
    ``weight * lr_mult / sqrt(in_features)``; stored bias = bias_init / lr_mult, used as
    ``bias * lr_mult``. Under Adam the update of the *effective* weight is then lr_mult times the
    update of an ordinary layer (StyleGAN, Karras et al. 2019, appendix C: mapping lr x0.01).
    ``activation``: leaky ReLU 0.2 times sqrt(2) after the bias.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True, bias_init: float = 0.0,
                 lr_mult: float = 1.0, activation: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / lr_mult)
        self.bias = nn.Parameter(torch.full((out_features,), float(bias_init) / lr_mult)) if bias else None
        self.weight_gain = lr_mult / math.sqrt(in_features)
        self.lr_mult = lr_mult
        self.activation = activation

    def effective_weight(self) -> torch.Tensor:
        """The weight the forward uses, ``[out, in]``: stored * lr_mult / sqrt(in_features)."""
        return self.weight * self.weight_gain

    def forward(self, x):
        b = self.bias * self.lr_mult if self.bias is not None else None
        x = F.linear(x, self.effective_weight().to(x.dtype), b.to(x.dtype) if b is not None else None)
        return _lrelu(x) if self.activation else x

    def extra_repr(self):
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}, lr_mult={self.lr_mult:g}, act={self.activation}"


class EqualizedConv2d(nn.Module):
    """Square convolution with equalized learning rate, same padding.

    ``x[N, Cin, H, W] -> [N, Cout, H, W]`` (``[N, Cout, H/2, W/2]`` with ``down``: with
    ``resample="fir"`` the [1, 3, 3, 1] filter before a stride-2 convolution, as the paper's
    code; with ``"bilinear"`` a 2x2 box filter after the convolution, i.e. bilinear
    downsampling by 2; ``[N, Cout, 2H, 2W]`` with ``up``: FIR upsampling around the convolution,
    ``fir.conv2d_resample``, or bilinear upsampling before it). Weight ~ N(0, 1) used as
    ``weight / sqrt(Cin * k * k)``. ``clamp``: the output (after bias and activation) is clamped
    to [-clamp, +clamp] (stylegan2-ada-pytorch's ``conv_clamp``); None clamps nothing.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel: int, *, bias: bool = True,
                 activation: bool = False, down: bool = False, up: bool = False, resample: Resample = "fir",
                 clamp: float | None = None):
        super().__init__()
        if up and down:
            raise ValueError("EqualizedConv2d: up and down together are not supported")
        self.clamp = None if clamp is None else float(clamp)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel, kernel))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel * kernel)
        self.activation = activation
        self.down, self.up = down, up
        self.resample = resample
        # Not persistent: a constant of the architecture, so checkpoints keep the same keys
        # whichever resampling a recipe picks.
        self.register_buffer("resample_filter", setup_filter() if down or up else None, persistent=False)

    def forward(self, x, gain: float = 1.0):
        """``gain``: the output (and the clamp) times ``gain`` (a resnet block's sqrt(0.5))."""
        weight = (self.weight * self.weight_gain).to(x.dtype)
        if (self.down or self.up) and self.resample == "fir":
            x = conv2d_resample(x, weight, self.resample_filter, down=2 if self.down else 1, up=2 if self.up else 1)
        else:
            if self.up:
                x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = F.conv2d(x, weight, padding=self.weight.shape[-1] // 2)
            if self.down:
                x = F.avg_pool2d(x, 2)
        if self.bias is not None:
            x = x + self.bias.to(x.dtype).reshape(1, -1, 1, 1)
        return _act(x, self.activation, gain, self.clamp)


# ----------------------------------------------------------------------- modulated convolution --


def _conv(x: torch.Tensor, weight: torch.Tensor, padding: int, groups: int, up: int,
          resample_filter: torch.Tensor | None) -> torch.Tensor:
    """The convolution inside a modulated convolution: plain, or with FIR upsampling (``up = 2``:
    ``fir.conv2d_resample``, which pads by k // 2 itself)."""
    if up == 1:
        return F.conv2d(x, weight, padding=padding, groups=groups)
    if resample_filter is None:
        raise ValueError("a modulated convolution with up = 2 needs resample_filter (fir.setup_filter())")
    return conv2d_resample(x, weight, resample_filter, up=up, groups=groups)


def _fp16_prenormalize(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor,
                       demodulate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weight, styles)`` scaled to keep an fp16 modulated convolution in range, as
    stylegan2-ada-pytorch's ``modulated_conv2d`` ("pre-normalize inputs to avoid FP16 overflow"):
    with fp16 activations and demodulation, each output channel's weight is divided by its
    largest magnitude times sqrt(Cin * k * k) and each sample's styles by their largest
    magnitude. Demodulation (eq. 3) cancels any per-output-channel and per-sample factor, so the
    result is the same up to rounding (and the 1e-8 eps); without it ``x * s`` and the
    shared-weight convolution of the "scaled" path overflow fp16 for styles of a few hundred.
    Anything but fp16 activations with demodulation: both returned unchanged."""
    if not demodulate or x.dtype != torch.float16:
        return weight, styles
    cout, cin, kh, kw = weight.shape
    # The official order of the float32 products, so the fp16 casts after them round the same.
    weight = weight * ((1.0 / math.sqrt(cin * kh * kw)) / weight.abs().amax(dim=(1, 2, 3), keepdim=True))
    styles = styles / styles.abs().amax(dim=1, keepdim=True)
    return weight, styles


def modulated_conv2d(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool = True,
                     padding: int = 0, eps: float = 1e-8, up: int = 1,
                     resample_filter: torch.Tensor | None = None) -> torch.Tensor:
    """Modulated convolution, grouped-convolution fast path (StyleGAN2 sec. 2.2, eq. 1-3).

    x: ``[N, Cin, H, W]``; weight: ``[Cout, Cin, k, k]`` (already scaled); styles: ``[N, Cin]``.
    Per sample n: ``w'_{o,i,k} = s_{n,i} * w_{o,i,k}`` (eq. 1); with ``demodulate``,
    ``w''_{o,i,k} = w'_{o,i,k} / sqrt(sum_{i,k} w'^2_{o,i,k} + eps)`` (eq. 3), so outputs keep
    unit variance for unit-variance inputs. The N per-sample convolutions run as one convolution
    with ``groups=N``. ``up = 2``: FIR upsampling by 2 around the convolution
    (``fir.conv2d_resample`` with ``resample_filter``; ``padding`` is then k // 2 by definition).
    fp16 ``x``: weight and styles pre-normalised first (``_fp16_prenormalize``, the same result).
    Returns ``[N, Cout, H', W']``.
    """
    weight, styles = _fp16_prenormalize(x, weight, styles, demodulate)
    n, cin, h, w_ = x.shape
    cout, _, kh, kw = weight.shape
    w = weight.unsqueeze(0) * styles.reshape(n, 1, cin, 1, 1)  # [N, Cout, Cin, k, k]
    if demodulate:
        w = w * torch.rsqrt(w.square().sum(dim=(2, 3, 4), keepdim=True) + eps)
    out = _conv(x.reshape(1, n * cin, h, w_), w.reshape(n * cout, cin, kh, kw).to(x.dtype), padding, n, up,
                resample_filter)
    return out.reshape(n, cout, out.shape[2], out.shape[3])


def modulated_conv2d_naive(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool = True,
                           padding: int = 0, eps: float = 1e-8, up: int = 1,
                           resample_filter: torch.Tensor | None = None) -> torch.Tensor:
    """Reference path of :func:`modulated_conv2d`: one ordinary convolution per sample with its
    own modulated (and demodulated) weight. Same shapes and formula; slow, for checking."""
    weight, styles = _fp16_prenormalize(x, weight, styles, demodulate)
    outs = []
    for i in range(x.shape[0]):
        w = weight * styles[i].reshape(1, -1, 1, 1)
        if demodulate:
            w = w / torch.sqrt(w.square().sum(dim=(1, 2, 3), keepdim=True) + eps)
        outs.append(_conv(x[i:i + 1], w.to(x.dtype), padding, 1, up, resample_filter))
    return torch.cat(outs)


def modulated_conv2d_scaled(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool = True,
                            padding: int = 0, eps: float = 1e-8, up: int = 1,
                            resample_filter: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`modulated_conv2d` computed by scaling activations instead of weights (the official
    code's non-fused path): ``conv(x * s, w) * d`` with ``d_{n,o} = (sum_i s_{n,i}^2 *
    sum_k w_{o,i,k}^2 + eps)^-1/2``, exactly eq. 3 since the style is constant over i's kernel.
    One shared-weight convolution for the whole batch: faster than groups=N on CPUs. fp16 ``x``:
    weight and styles pre-normalised first (``_fp16_prenormalize``, the same result)."""
    weight, styles = _fp16_prenormalize(x, weight, styles, demodulate)
    out = _conv(x * styles.to(x.dtype).reshape(*styles.shape, 1, 1), weight.to(x.dtype), padding, 1, up,
                resample_filter)
    if demodulate:
        dtype = torch.promote_types(styles.dtype, torch.float32)
        # Elementwise product and sum, not a matmul, so autocast keeps it in float32.
        d = torch.rsqrt((styles.to(dtype).square().unsqueeze(1) * weight.to(dtype).square().sum(dim=(2, 3))).sum(2)
                        + eps)  # [N, Cout]
        out = out * d.to(out.dtype).reshape(*d.shape, 1, 1)
    return out


_MODCONV = {"grouped": modulated_conv2d, "scaled": modulated_conv2d_scaled, "naive": modulated_conv2d_naive}


class ModulatedConv(nn.Module):
    """One synthesis layer: style = affine(w); modulated conv [with 2x upsampling: FIR or
    bilinear, ``resample``]; noise; bias; activation. ``x[N, Cin, r', r'], w[N, w_dim] -> [N,
    Cout, r, r]``.

    The affine layer's bias starts at 1 so styles start near 1 (official code). Noise (sec. 2.2 of
    StyleGAN2; StyleGAN sec. 2) is per-pixel N(0, 1), one map per sample shared by all channels,
    times a learned per-layer strength that starts at 0. ``noise_mode``: "random" draws fresh
    noise (``gan_kit.batch_randn``: drawn for the global batch under several processes), "const"
    uses a buffer drawn at construction, "none" adds none.
    ``modconv``: which implementation of the same formula runs: "grouped" (one convolution
    with groups=N), "scaled" (activations scaled, one shared-weight convolution) or "naive"
    (per-sample loop, the reference).
    ``clamp``: the output (after noise, bias and activation) is clamped to [-clamp, +clamp], for a
    synthesis layer and a ToRGB layer alike (stylegan2-ada-pytorch's ``conv_clamp``); None clamps
    nothing.
    """

    def __init__(self, in_channels: int, out_channels: int, w_dim: int, resolution: int, *, kernel: int = 3,
                 up: bool = False, demodulate: bool = True, noise: bool = True, activation: bool = True,
                 modconv: str = "grouped", resample: Resample = "fir", clamp: float | None = None):
        super().__init__()
        self.clamp = None if clamp is None else float(clamp)
        self.affine = EqualizedLinear(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel, kernel))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel * kernel)
        self.up, self.demodulate, self.activation = up, demodulate, activation
        self.resolution = resolution
        self.modconv = modconv
        self.resample = resample
        self.register_buffer("resample_filter", setup_filter() if up else None, persistent=False)  # as EqualizedConv2d
        if noise:
            self.noise_strength = nn.Parameter(torch.zeros(()))
            self.register_buffer("noise_const", torch.randn(resolution, resolution))
        else:
            self.noise_strength = None

    def forward(self, x, w, noise_mode: NoiseMode = "random", gain: float = 1.0):
        """``gain``: the output (and the clamp) times ``gain`` (a resnet block's sqrt(0.5))."""
        styles = self.affine(w)
        up = 1
        if self.up and self.resample == "bilinear":
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        elif self.up:
            up = 2
        conv = _MODCONV[self.modconv]
        # Demodulation divides weight_gain out, so the stored weight goes in as it is; without it
        # the gain scales the styles. Both as the official code orders its float32 products, so
        # an fp16 block's casts round as the official ones do.
        if not self.demodulate:
            styles = styles * self.weight_gain
        x = conv(x, self.weight, styles, demodulate=self.demodulate,
                 padding=self.weight.shape[-1] // 2, up=up, resample_filter=self.resample_filter)
        if self.noise_strength is not None and noise_mode != "none":
            if noise_mode == "random":
                # One map per sample, drawn for the global batch (N processes train as one).
                noise = batch_randn(x.shape[0], 1, x.shape[2], x.shape[3], device=x.device, dtype=x.dtype)
            else:
                noise = self.noise_const
            # Scaled by the strength in float32 (at least) and added in place, so an fp16 x
            # rounds once, as the official code's x.add_(noise). The conv output is a fresh
            # tensor no backward needs, so the in-place add is safe for autograd.
            x = x.add_(noise * self.noise_strength)
        x = x + self.bias.to(x.dtype).reshape(1, -1, 1, 1)
        return _act(x, self.activation, gain, self.clamp)
