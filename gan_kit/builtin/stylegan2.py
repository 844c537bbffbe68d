"""StyleGAN2 (Karras et al. 2020, "Analyzing and Improving the Image Quality of StyleGAN",
arXiv:1912.04958): the ``stylegan2`` architecture and the ``path-length`` G penalty.

G = mapping network (z -> W, sec. 2 of StyleGAN, Karras et al. 2019) + skip-architecture
synthesis network (StyleGAN2 sec. 4.1, fig. 7a) built from modulated 3x3 convolutions with
weight demodulation (sec. 2.2, eq. 1-3) and per-pixel noise. D = residual network (sec. 4.1,
fig. 7c) ending in minibatch standard deviation (PGGAN sec. 3) and two FC layers.

Choices that differ from the paper's code (all documented in docs/architectures.md):

* Resampling is bilinear (``F.interpolate`` up, 2x2 box filter = bilinear at factor 1/2 down)
  instead of the [1,3,3,1] FIR filter.
* Every layer applies its equalized-learning-rate scale itself (PGGAN sec. 4.1; StyleGAN2 keeps
  it): the stored weight is N(0, 1) / lr_mult and the forward uses ``weight * lr_mult /
  sqrt(fan_in)``. The layers hold raw Parameters (not nn.Linear / nn.Conv2d), so a recipe
  initializer finds nothing to change; the architecture accepts only ``[init] name =
  "equalized-lr"`` (the default), which its layers already implement.
* Activations are leaky ReLU (slope 0.2) times sqrt(2) (the gain sits on the activation, as in
  the official code, not in the weights).
"""

from __future__ import annotations

import math
from typing import Literal

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import Architecture, GankitError, Penalty, hookimpl, option
from gan_kit.builtin.pggan import MinibatchStddev

__all__ = [
    "StyleGAN2",
    "PathLength",
    "Generator",
    "Discriminator",
    "MappingNetwork",
    "ModulatedConv",
    "EqualizedLinear",
    "EqualizedConv2d",
    "modulated_conv2d",
    "modulated_conv2d_naive",
    "modulated_conv2d_scaled",
]

_ACT_GAIN = math.sqrt(2.0)
NoiseMode = Literal["random", "const", "none"]


def _lrelu(x: torch.Tensor) -> torch.Tensor:
    # He gain on the activation (official StyleGAN2 code) keeps unit variance through the layer.
    return F.leaky_relu(x, 0.2) * _ACT_GAIN


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

    ``x[N, Cin, H, W] -> [N, Cout, H, W]`` (``[N, Cout, H/2, W/2]`` with ``down``: a 2x2 box
    filter after the convolution, i.e. bilinear downsampling by 2 in place of the paper's FIR
    filter). Weight ~ N(0, 1) used as ``weight / sqrt(Cin * k * k)``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel: int, *, bias: bool = True,
                 activation: bool = False, down: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel, kernel))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel * kernel)
        self.activation = activation
        self.down = down

    def forward(self, x):
        x = F.conv2d(x, (self.weight * self.weight_gain).to(x.dtype), padding=self.weight.shape[-1] // 2)
        if self.down:
            x = F.avg_pool2d(x, 2)
        if self.bias is not None:
            x = x + self.bias.to(x.dtype).reshape(1, -1, 1, 1)
        return _lrelu(x) if self.activation else x


# ----------------------------------------------------------------------- modulated convolution --


def modulated_conv2d(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool = True,
                     padding: int = 0, eps: float = 1e-8) -> torch.Tensor:
    """Modulated convolution, grouped-convolution fast path (StyleGAN2 sec. 2.2, eq. 1-3).

    x: ``[N, Cin, H, W]``; weight: ``[Cout, Cin, k, k]`` (already scaled); styles: ``[N, Cin]``.
    Per sample n: ``w'_{o,i,k} = s_{n,i} * w_{o,i,k}`` (eq. 1); with ``demodulate``,
    ``w''_{o,i,k} = w'_{o,i,k} / sqrt(sum_{i,k} w'^2_{o,i,k} + eps)`` (eq. 3), so outputs keep
    unit variance for unit-variance inputs. The N per-sample convolutions run as one convolution
    with ``groups=N``. Returns ``[N, Cout, H', W']``.
    """
    n, cin, h, w_ = x.shape
    cout, _, kh, kw = weight.shape
    w = weight.unsqueeze(0) * styles.reshape(n, 1, cin, 1, 1)  # [N, Cout, Cin, k, k]
    if demodulate:
        w = w * torch.rsqrt(w.square().sum(dim=(2, 3, 4), keepdim=True) + eps)
    out = F.conv2d(x.reshape(1, n * cin, h, w_), w.reshape(n * cout, cin, kh, kw).to(x.dtype),
                   padding=padding, groups=n)
    return out.reshape(n, cout, out.shape[2], out.shape[3])


def modulated_conv2d_naive(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool = True,
                           padding: int = 0, eps: float = 1e-8) -> torch.Tensor:
    """Reference path of :func:`modulated_conv2d`: one ordinary convolution per sample with its
    own modulated (and demodulated) weight. Same shapes and formula; slow, for checking."""
    outs = []
    for i in range(x.shape[0]):
        w = weight * styles[i].reshape(1, -1, 1, 1)
        if demodulate:
            w = w / torch.sqrt(w.square().sum(dim=(1, 2, 3), keepdim=True) + eps)
        outs.append(F.conv2d(x[i:i + 1], w.to(x.dtype), padding=padding))
    return torch.cat(outs)


def modulated_conv2d_scaled(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor, *, demodulate: bool = True,
                            padding: int = 0, eps: float = 1e-8) -> torch.Tensor:
    """:func:`modulated_conv2d` computed by scaling activations instead of weights (the official
    code's non-fused path): ``conv(x * s, w) * d`` with ``d_{n,o} = (sum_i s_{n,i}^2 *
    sum_k w_{o,i,k}^2 + eps)^-1/2``, exactly eq. 3 since the style is constant over i's kernel.
    One shared-weight convolution for the whole batch: faster than groups=N on CPUs."""
    out = F.conv2d(x * styles.to(x.dtype).reshape(*styles.shape, 1, 1), weight.to(x.dtype), padding=padding)
    if demodulate:
        dtype = torch.promote_types(styles.dtype, torch.float32)
        # Elementwise product and sum, not a matmul, so autocast keeps it in float32.
        d = torch.rsqrt((styles.to(dtype).square().unsqueeze(1) * weight.to(dtype).square().sum(dim=(2, 3))).sum(2)
                        + eps)  # [N, Cout]
        out = out * d.to(out.dtype).reshape(*d.shape, 1, 1)
    return out


_MODCONV = {"grouped": modulated_conv2d, "scaled": modulated_conv2d_scaled, "naive": modulated_conv2d_naive}


class ModulatedConv(nn.Module):
    """One synthesis layer: style = affine(w); [bilinear 2x upsample]; modulated conv; noise;
    bias; activation. ``x[N, Cin, r', r'], w[N, w_dim] -> [N, Cout, r, r]``.

    The affine layer's bias starts at 1 so styles start near 1 (official code). Noise (sec. 2.2 of
    StyleGAN2; StyleGAN sec. 2) is per-pixel N(0, 1), one map per sample shared by all channels,
    times a learned per-layer strength that starts at 0. ``noise_mode``: "random" draws fresh
    noise, "const" uses a buffer drawn at construction, "none" adds none.
    ``modconv``: which implementation of the same formula runs: "grouped" (one convolution
    with groups=N), "scaled" (activations scaled, one shared-weight convolution) or "naive"
    (per-sample loop, the reference).
    """

    def __init__(self, in_channels: int, out_channels: int, w_dim: int, resolution: int, *, kernel: int = 3,
                 up: bool = False, demodulate: bool = True, noise: bool = True, activation: bool = True,
                 modconv: str = "grouped"):
        super().__init__()
        self.affine = EqualizedLinear(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel, kernel))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.weight_gain = 1.0 / math.sqrt(in_channels * kernel * kernel)
        self.up, self.demodulate, self.activation = up, demodulate, activation
        self.resolution = resolution
        self.modconv = modconv
        if noise:
            self.noise_strength = nn.Parameter(torch.zeros(()))
            self.register_buffer("noise_const", torch.randn(resolution, resolution))
        else:
            self.noise_strength = None

    def forward(self, x, w, noise_mode: NoiseMode = "random"):
        styles = self.affine(w)
        if self.up:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        conv = _MODCONV[self.modconv]
        x = conv(x, self.weight * self.weight_gain, styles, demodulate=self.demodulate,
                 padding=self.weight.shape[-1] // 2)
        if self.noise_strength is not None and noise_mode != "none":
            if noise_mode == "random":
                noise = torch.randn(x.shape[0], 1, x.shape[2], x.shape[3], device=x.device, dtype=x.dtype)
            else:
                noise = self.noise_const.to(x.dtype)
            x = x + noise * self.noise_strength.to(x.dtype)
        x = x + self.bias.to(x.dtype).reshape(1, -1, 1, 1)
        return _lrelu(x) if self.activation else x


# ------------------------------------------------------------------------------------ networks --


class MappingNetwork(nn.Module):
    """``z[N, z_dim] -> w[N, w_dim]``: z normalised by its second moment, then ``num_layers``
    equalized FC layers with leaky ReLU and learning-rate multiplier ``lr_mult`` (StyleGAN sec. 2,
    appendix C: 8 layers, lr x0.01)."""

    def __init__(self, z_dim: int, w_dim: int, num_layers: int, lr_mult: float):
        super().__init__()
        dims = [z_dim] + [w_dim] * num_layers
        self.layers = nn.ModuleList(EqualizedLinear(a, b, lr_mult=lr_mult, activation=True)
                                    for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, z):
        x = z * torch.rsqrt(z.square().mean(dim=1, keepdim=True) + 1e-8)
        for layer in self.layers:
            x = layer(x)
        return x


class Generator(nn.Module):
    """StyleGAN2 G, skip architecture: ``z[N, latent_dim] -> images[N, channels, r, r]``.

    ``mapping(z, truncation_psi) -> ws[N, num_ws, w_dim]``, ``synthesis(ws, noise_mode) -> img``.
    num_ws = 2 * log2(r) - 2: block 4x4 has one conv, every later block two (the first upsamples),
    and each block's toRGB shares its W with the next block's first conv (official layout).
    ``w_avg`` (buffer ``[w_dim]``) is the running average of mapped W, updated in training-mode
    ``forward`` as ``w_avg <- lerp(mean_N(w), w_avg, w_avg_beta)``; the truncation trick uses it.
    """

    def __init__(self, resolution: int, channels: int, latent_dim: int, w_dim: int, nf, *, mapping_layers: int = 8,
                 mapping_lr_mult: float = 0.01, style_mixing_prob: float = 0.9, w_avg_beta: float = 0.995,
                 modconv: str = "grouped"):
        super().__init__()
        self.latent_dim, self.w_dim, self.resolution = latent_dim, w_dim, resolution
        self.style_mixing_prob, self.w_avg_beta = float(style_mixing_prob), float(w_avg_beta)
        self.resolutions = [2 ** i for i in range(2, int(math.log2(resolution)) + 1)]
        self.num_ws = 2 * len(self.resolutions)
        self.mapping_network = MappingNetwork(latent_dim, w_dim, mapping_layers, mapping_lr_mult)
        self.register_buffer("w_avg", torch.zeros(w_dim))
        self.const = nn.Parameter(torch.randn(nf(4), 4, 4))
        self.convs = nn.ModuleDict()
        self.to_rgb = nn.ModuleDict()
        for res in self.resolutions:
            c = nf(res)
            layers = [ModulatedConv(c, c, w_dim, res, modconv=modconv)]
            if res > 4:
                layers.insert(0, ModulatedConv(nf(res // 2), c, w_dim, res, up=True, modconv=modconv))
            self.convs[str(res)] = nn.ModuleList(layers)
            self.to_rgb[str(res)] = ModulatedConv(c, channels, w_dim, res, kernel=1, demodulate=False,
                                                  noise=False, activation=False, modconv=modconv)

    def mapping(self, z: torch.Tensor, truncation_psi: float = 1.0, *, update_w_avg: bool = False) -> torch.Tensor:
        """``z[N, latent_dim] -> ws[N, num_ws, w_dim]``; with ``truncation_psi`` != 1 every W is
        ``w_avg + psi * (w - w_avg)`` (StyleGAN sec. 3.1 / StyleGAN2 appendix: truncation trick)."""
        w = self.mapping_network(z)
        if update_w_avg:
            with torch.no_grad():
                self.w_avg.copy_(w.detach().float().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        if truncation_psi != 1:
            w = self.w_avg.to(w.dtype).lerp(w, float(truncation_psi))
        return w.unsqueeze(1).expand(-1, self.num_ws, -1)

    def mix_styles(self, ws: torch.Tensor) -> torch.Tensor:
        """Style-mixing regularisation (StyleGAN sec. 3.1): with probability style_mixing_prob the
        W of a second random z replaces ``ws[:, cutoff:]`` from a random cut-off layer in
        [1, num_ws). One cut-off per batch (official code); tensor ops only, so no graph break
        under torch.compile. ``ws[N, num_ws, w_dim]`` -> same shape."""
        n = ws.shape[0]
        z2 = torch.randn(n, self.latent_dim, device=ws.device)
        w2 = self.mapping(z2).to(ws.dtype)
        cutoff = torch.randint(1, self.num_ws, (), device=ws.device)
        mix = torch.rand((), device=ws.device) < self.style_mixing_prob
        cutoff = torch.where(mix, cutoff, torch.full_like(cutoff, self.num_ws))
        layer = torch.arange(self.num_ws, device=ws.device).reshape(1, -1, 1)
        return torch.where(layer >= cutoff, w2, ws)

    def synthesis(self, ws: torch.Tensor, noise_mode: NoiseMode = "random") -> torch.Tensor:
        """``ws[N, num_ws, w_dim] -> images[N, channels, r, r]``: per resolution the convs, then
        the skip output ``img = upsample(img) + toRGB(x)`` (sec. 4.1, fig. 7a)."""
        if ws.shape[1] != self.num_ws:
            raise ValueError(f"synthesis: expected ws[N, {self.num_ws}, {self.w_dim}], got {tuple(ws.shape)}")
        x = self.const.to(ws.dtype).unsqueeze(0).expand(ws.shape[0], -1, -1, -1)
        img = None
        idx = 0
        for res in self.resolutions:
            for conv in self.convs[str(res)]:
                x = conv(x, ws[:, idx], noise_mode)
                idx += 1
            rgb = self.to_rgb[str(res)](x, ws[:, idx])
            img = rgb if img is None else F.interpolate(img, scale_factor=2, mode="bilinear", align_corners=False) + rgb
        return img

    def forward(self, z: torch.Tensor, labels=None, *, truncation_psi: float = 1.0,
                noise_mode: NoiseMode = "random") -> torch.Tensor:
        """Images ``[N, channels, r, r]`` for ``z[N, latent_dim]``. In training mode it updates
        ``w_avg`` and applies style mixing; in eval mode (G_ema) it does neither."""
        if labels is not None:
            raise ValueError("stylegan2 is unconditional: labels must be None")
        ws = self.mapping(z, truncation_psi, update_w_avg=self.training)
        if self.training and self.style_mixing_prob > 0:
            ws = self.mix_styles(ws)
        return self.synthesis(ws, noise_mode)


class DBlock(nn.Module):
    """Residual D block (sec. 4.1, fig. 7c): ``(skip(x) + conv1(conv0(x))) / sqrt(2)``, where
    conv1 and the 1x1 skip (no bias) downsample by 2. ``[N, Cin, r, r] -> [N, Cout, r/2, r/2]``."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv0 = EqualizedConv2d(in_channels, in_channels, 3, activation=True)
        self.conv1 = EqualizedConv2d(in_channels, out_channels, 3, activation=True, down=True)
        self.skip = EqualizedConv2d(in_channels, out_channels, 1, bias=False, down=True)

    def forward(self, x):
        return (self.skip(x) + self.conv1(self.conv0(x))) * math.sqrt(0.5)


class Discriminator(nn.Module):
    """StyleGAN2 residual D: ``images[N, channels, r, r] -> logits[N]``.

    fromRGB (1x1) at full resolution, residual blocks down to 4x4, minibatch stddev (group
    ``mbstd_group_size``, 0 = off), 3x3 conv, FC, FC to one logit.
    """

    def __init__(self, resolution: int, channels: int, nf, mbstd_group_size: int = 4):
        super().__init__()
        self.from_rgb = EqualizedConv2d(channels, nf(resolution), 1, activation=True)
        res = [2 ** i for i in range(int(math.log2(resolution)), 2, -1)]
        self.blocks = nn.ModuleList(DBlock(nf(r), nf(r // 2)) for r in res)
        c4 = nf(4)
        self.mbstd = MinibatchStddev(mbstd_group_size) if mbstd_group_size > 0 else None
        self.conv = EqualizedConv2d(c4 + (1 if self.mbstd is not None else 0), c4, 3, activation=True)
        self.fc = EqualizedLinear(c4 * 16, c4, activation=True)
        self.out = EqualizedLinear(c4, 1)

    def forward(self, img):
        x = self.from_rgb(img)
        for block in self.blocks:
            x = block(x)
        if self.mbstd is not None:
            x = self.mbstd(x)
        x = self.conv(x)
        x = self.fc(x.flatten(1))
        return self.out(x).squeeze(1)


# -------------------------------------------------------------------------------- architecture --


def _positive(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


def _unit(v):
    return None if 0 <= v <= 1 else f"must be in [0, 1], got {v}"


class StyleGAN2(Architecture):
    """StyleGAN2 (Karras et al. 2020): mapping network, modulated convs with demodulation, noise, skip G, residual D; static resolution."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(64, help="Size of the latent z (StyleGAN2: 512).", validator=_positive)
        w_dim: int = option(64, help="Size of the intermediate latent W (StyleGAN2: 512).", validator=_positive)
        mapping_layers: int = option(8, help="FC layers of the mapping network z -> W.", validator=_positive)
        mapping_lr_mult: float = option(0.01, help="Learning-rate multiplier of the mapping network (StyleGAN: 0.01).",
                                        validator=lambda v: None if v > 0 else f"must be > 0, got {v}")
        channel_base: int = option(512, help="Feature maps at resolution r: min(channel_base // r, channel_max) "
                                             "(StyleGAN2 config F: 32768).", validator=_positive)
        channel_max: int = option(64, help="Largest number of feature maps (config F: 512).", validator=_positive)
        mbstd_group_size: int = option(4, help="Minibatch-stddev group size (0 disables the layer).",
                                       validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")
        style_mixing_prob: float = option(0.9, help="Probability of style mixing per training batch (0 = off).",
                                          validator=_unit)
        w_avg_beta: float = option(0.995, help="Decay of the running average of W kept for truncation, per "
                                               "training forward.", validator=_unit)
        modconv: Literal["grouped", "scaled", "naive"] = option(
            "grouped", help='Implementation of the modulated convolution (same formula): "grouped" (one '
                            'convolution with groups=N), "scaled" (activations scaled around one shared-weight '
                            'convolution; faster on CPUs) or "naive" (per-sample loop, for checking).')

    @classmethod
    def problems(cls, o, recipe):
        if recipe.growth.name != "static":
            yield "growth.name", (f"stylegan2 does not grow: use [growth] name = \"static\", "
                                  f"not {recipe.growth.name!r}")
        init = recipe.init
        default_gain = math.sqrt(2.0)
        if init.name != "equalized-lr" or abs(float(getattr(init.options, "gain", default_gain)) - default_gain) > 1e-12:
            yield "init.name", (f"stylegan2's layers apply the equalized learning rate themselves, so the initializer "
                                f"{init.name!r} would not change them (set [init] name = \"equalized-lr\" with its "
                                f"default gain, or remove the [init] table)")
        if min(o.channel_base // recipe.resolution, o.channel_max) < 1:
            yield "channel_base", (f"gives no feature maps at resolution {recipe.resolution} "
                                   f"(use channel_base >= {recipe.resolution})")
        g = o.mbstd_group_size
        batch = getattr(recipe.growth.options, "batch_size", None)
        if g > 0 and isinstance(batch, int) and batch >= g and batch % g:
            yield "mbstd_group_size", (f"group size {g} does not divide the batch size {batch} "
                                       f"(choose a batch that is a multiple of {g}, or another group size)")

    def batch_problem(self, batch: int) -> str | None:
        g = self.options.mbstd_group_size
        if g > 0 and batch >= g and batch % g:
            return f"mbstd_group_size {g} does not divide the batch {batch}"
        return None

    def nf(self, res: int) -> int:
        o = self.options
        return int(min(o.channel_base // res, o.channel_max))

    def build(self, resolution, channels):
        o = self.options
        G = Generator(resolution, channels, o.latent_dim, o.w_dim, self.nf, mapping_layers=o.mapping_layers,
                      mapping_lr_mult=o.mapping_lr_mult, style_mixing_prob=o.style_mixing_prob,
                      w_avg_beta=o.w_avg_beta, modconv=o.modconv)
        D = Discriminator(resolution, channels, self.nf, o.mbstd_group_size)
        return G, D


# -------------------------------------------------------------------------------- path length --


class PathLength(Penalty):
    """Path-length regularisation of G (StyleGAN2 sec. 3.2, eq. 4): E[(||J_w^T y||_2 - a)^2], a = running mean of the lengths."""

    network = "G"

    @attrs.frozen
    class Options:
        interval: int = option(4, help="Lazy regularisation interval k: applied every k-th G step (StyleGAN2 "
                                       "sec. 3.1); the engine scales it by k.", validator=_positive)
        batch_shrink: int = option(2, help="The penalty's batch is the per-process batch divided by this "
                                           "(official code: 2).", validator=_positive)
        decay: float = option(0.01, help="Rate of the exponential average a of the path lengths "
                                         "(a <- a + decay * (mean length - a)).", validator=_unit)

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        self.interval = self.options.interval
        self.pl_mean = torch.zeros((), dtype=torch.float32)

    @classmethod
    def problems(cls, o, recipe):
        if getattr(Penalty, "network", None) is None:
            # Until the engine knows G penalties it would call this one as a D penalty.
            yield "", ("path-length regularises G, and this gankit applies penalties to D only "
                       "(remove the path-length [[penalty]] table)")

    def __call__(self, inputs, ctx) -> torch.Tensor:
        """Unweighted scalar ``mean_n (|J_w^T y|_n - a)^2`` on ``batch_size // batch_shrink``
        fresh latents. ``J_w^T y`` is the gradient of ``sum(img * y)`` w.r.t. ws, with ``y``
        N(0, 1) / sqrt(H * W); its length is ``sqrt(mean over the num_ws layers of the squared
        norm)`` (official code). ``a`` is updated first, ``a <- lerp(a, mean length, decay)``,
        and the penalty uses the updated ``a`` (gradient flows through it, as in the official
        code). Not multiplied by the interval. Needs ``inputs.G.mapping`` / ``.synthesis``."""
        G = inputs.G
        n = max(1, int(inputs.batch_size) // self.options.batch_shrink)
        z = ctx.latent(n)
        with ctx.autocast():
            ws = G.mapping(z)
            if getattr(G, "training", False) and hasattr(G, "mix_styles") and getattr(G, "style_mixing_prob", 0) > 0:
                ws = G.mix_styles(ws)
            img = G.synthesis(ws)
        img = img.float()
        y = torch.randn_like(img) / math.sqrt(img.shape[2] * img.shape[3])
        grad = ctx.gradients((img * y).sum(), ws).float()
        lengths = grad.square().sum(dim=2).mean(dim=1).sqrt()  # [n]
        pl_mean = self.pl_mean.to(lengths.device).lerp(lengths.mean(), self.options.decay)
        self.pl_mean = pl_mean.detach()
        return (lengths - pl_mean).square().mean()

    def state_dict(self) -> dict:
        """``{"pl_mean": float32 scalar tensor on the CPU}``."""
        return {"pl_mean": self.pl_mean.detach().cpu().clone()}

    def load_state_dict(self, d: dict) -> None:
        """Restore ``pl_mean``; raises GankitError when it is missing."""
        if "pl_mean" not in d:
            raise GankitError(f"path-length state: missing 'pl_mean' (got keys {sorted(d)}); the checkpoint "
                              f"was not written with this penalty")
        self.pl_mean = torch.as_tensor(d["pl_mean"], dtype=torch.float32).clone()


@hookimpl
def register_architectures(register):
    register("stylegan2", StyleGAN2)


@hookimpl
def register_penalties(register):
    register("path-length", PathLength)
