"""StyleGAN2 networks and the ``stylegan2`` architecture component (Karras et al. 2020,
arXiv:1912.04958, sec. 4.1, fig. 7: skip G and residual D by default, the "orig", "skip" and
"resnet" variants of each as options, as stylegan2-ada-pytorch builds them; StyleGAN, Karras et
al. 2019: mapping network, style mixing, truncation). Class-conditional form as
stylegan2-ada-pytorch's (Karras et al. 2020b, arXiv:2006.06676): the label embedded and joined to
z in G's mapping network, and a label mapping ("cmap") projected onto D's last features in its
epilogue."""

from __future__ import annotations

import copy

import math
from typing import Literal

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import Architecture, batch_randn, mean_over_processes, option
from gan_kit.builtin.architectures.conditioning import check_labels
from gan_kit.builtin.architectures.pggan import mbstd_batch_problem, MinibatchStddev
from gan_kit.builtin.architectures.stylegan2.d_blur import blur_images, blur_taps
from gan_kit.builtin.architectures.stylegan2.fir import downsample2d, setup_filter, upsample2d
from gan_kit.builtin.architectures.stylegan2.layers import EqualizedConv2d, EqualizedLinear, ModulatedConv, NoiseMode, Resample

__all__ = ["MappingNetwork", "Generator", "DBlock", "Discriminator", "StyleGAN2", "Fp16Devices", "fp16_resolution"]

#: Where the fp16 blocks (``num_fp16_res``) compute in float16: "cuda" on CUDA devices only (the
#: StyleGAN3 repository's networks_stylegan2 forces float32 elsewhere), "all" on every device
#: (stylegan2-ada-pytorch's networks, also on the CPU).
Fp16Devices = Literal["cuda", "all"]


def fp16_resolution(resolution: int, num_fp16_res: int) -> int:
    """The lowest resolution whose G block and D block compute in float16 when the networks have
    ``num_fp16_res`` fp16 resolutions: ``max(2 ** (log2(resolution) + 1 - num_fp16_res), 8)``
    (stylegan2-ada-pytorch, Karras et al. 2020b: the ``num_fp16_res`` highest resolutions, never
    the 4x4 block or D's epilogue). ``num_fp16_res = 0``: ``2 * resolution``, i.e. no block."""
    return max(2 ** (int(math.log2(resolution)) + 1 - num_fp16_res), 8)


def _fp16_enabled(num_fp16_res: int, devices: str, force_fp32: bool, device: torch.device) -> bool:
    """Whether this forward computes the fp16 blocks in float16: some exist, ``force_fp32`` is
    off, the device is one ``devices`` names, and no autocast is active on it (autocast, i.e.
    ``run.precision = "bf16"`` / ``"fp16"``, sets the precision of the whole networks)."""
    if num_fp16_res == 0 or force_fp32 or (devices == "cuda" and device.type != "cuda"):
        return False
    return not torch.is_autocast_enabled(device.type)



def _normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + 1e-8)`` over dim 1 (StyleGAN's normalisation of z)."""
    return x * torch.rsqrt(x.square().mean(dim=1, keepdim=True) + 1e-8)


class MappingNetwork(nn.Module):
    """``z[N, z_dim] (, labels[N]) -> w[N, w_dim]``: z normalised by its second moment, then
    ``num_layers`` equalized FC layers with leaky ReLU and learning-rate multiplier ``lr_mult``
    (StyleGAN sec. 2, appendix C: 8 layers, lr x0.01).

    ``num_classes`` > 0: the label is embedded (an equalized FC layer, lr x1, on its one-hot
    vector: ``embed_features`` features, None = ``w_dim``), normalised the same way and
    concatenated to the normalised z before the first layer (stylegan2-ada-pytorch's
    ``MappingNetwork`` with ``c_dim``). ``layer_features``: width of the hidden FC layers (None =
    ``w_dim``); the last layer always gives ``w_dim``. ``z_dim = 0``: the label alone (D's label
    mapping)."""

    def __init__(self, z_dim: int, w_dim: int, num_layers: int, lr_mult: float, num_classes: int = 0, *,
                 embed_features: int | None = None, layer_features: int | None = None):
        super().__init__()
        self.z_dim, self.num_classes = z_dim, num_classes
        embed = (embed_features or w_dim) if num_classes else 0
        hidden = layer_features or w_dim
        self.embed = EqualizedLinear(num_classes, embed) if num_classes else None
        dims = [z_dim + embed] + [hidden] * (num_layers - 1) + [w_dim]
        self.layers = nn.ModuleList(EqualizedLinear(a, b, lr_mult=lr_mult, activation=True)
                                    for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, z: torch.Tensor | None, labels: torch.Tensor | None = None) -> torch.Tensor:
        parts = [_normalize(z)] if self.z_dim else []
        if self.embed is not None:
            # A comparison, not F.one_hot: that one checks the labels' range on the host (a
            # device sync per forward); the data set's labels are checked when it is built.
            classes = torch.arange(self.num_classes, device=labels.device)
            one_hot = (labels.unsqueeze(1) == classes).to(self.embed.weight.dtype)
            parts.append(_normalize(self.embed(one_hot)))
        x = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        for layer in self.layers:
            x = layer(x)
        return x


GArchitecture = Literal["skip", "orig", "resnet"]
DArchitecture = Literal["resnet", "orig", "skip"]


class Generator(nn.Module):
    """StyleGAN2 G: ``z[N, latent_dim] -> images[N, channels, r, r]``.

    ``mapping(z, truncation_psi) -> ws[N, num_ws, w_dim]``, ``synthesis(ws, noise_mode) -> img``.
    num_ws = 2 * log2(r) - 2: block 4x4 has one conv, every later block two (the first upsamples),
    and each block's toRGB shares its W with the next block's first conv; the last block's toRGB
    takes the last W (official layout).

    ``architecture`` (sec. 4.1, fig. 7; stylegan2-ada-pytorch's ``SynthesisBlock``):
    "skip" (the paper's G, fig. 7b): a toRGB at every resolution, ``img = upsample(img) +
    toRGB(x)``; "orig" (StyleGAN's plain network, no skips): one toRGB, at the last block; "resnet"
    (fig. 7c): one toRGB at the last block, and every block after 4x4 is residual, ``(skip(x) +
    conv1(conv0(x))) * sqrt(0.5)`` with ``skip`` a 1x1 upsampling convolution without bias
    (computed as the reference: each branch times sqrt(0.5), conv1's clamp scaled by the same gain,
    then summed).

    ``w_avg`` (buffer ``[w_dim]``) is the running average of mapped W, updated in training-mode
    ``forward`` as ``w_avg <- lerp(mean_N(w), w_avg, w_avg_beta)`` (the mean over the global batch
    under several processes); the truncation trick uses it, on the first ``truncation_cutoff`` Ws
    only (None: all). ``num_classes`` > 0: ``G(z, labels[N])``, the label joined to z in the
    mapping network (``embed_features``, ``layer_features``: its widths, None = w_dim).
    ``resample``: "fir" ([1, 3, 3, 1] filter, the paper's) or "bilinear" upsampling.
    ``conv_clamp``: every synthesis layer's and ToRGB layer's output is clamped to [-conv_clamp,
    +conv_clamp] (stylegan2-ada-pytorch's ``conv_clamp``, 256 with its fp16 layers); None clamps
    nothing. The mapping network and the resnet skips are never clamped (as the reference).
    ``num_fp16_res``: the blocks at resolutions >= ``fp16_resolution(resolution, num_fp16_res)``
    compute in float16 (the const or the incoming features cast at the block's entry, weights
    cast to float16, styles and demodulation in float32, each toRGB's output cast back to float32
    before it is added to the float32 skip image), on the devices ``fp16_devices`` names, when no
    autocast is active and ``force_fp32`` is False (stylegan2-ada-pytorch's ``SynthesisBlock``).
    """

    def __init__(self, resolution: int, channels: int, latent_dim: int, w_dim: int, nf, *, mapping_layers: int = 8,
                 mapping_lr_mult: float = 0.01, style_mixing_prob: float = 0.9, w_avg_beta: float = 0.995,
                 modconv: str = "grouped", resample: Resample = "fir", num_classes: int = 0,
                 conv_clamp: float | None = None, architecture: GArchitecture = "skip",
                 truncation_cutoff: int | None = None, embed_features: int | None = None,
                 layer_features: int | None = None, num_fp16_res: int = 0, fp16_devices: Fp16Devices = "cuda"):
        super().__init__()
        if architecture not in ("skip", "orig", "resnet"):
            raise ValueError(f"Generator: architecture must be 'skip', 'orig' or 'resnet', got {architecture!r}")
        self.latent_dim, self.w_dim, self.resolution = latent_dim, w_dim, resolution
        self.conv_clamp = conv_clamp
        self.architecture = architecture
        self.truncation_cutoff = truncation_cutoff
        self.num_fp16_res, self.fp16_devices = num_fp16_res, fp16_devices
        self.fp16_resolution = fp16_resolution(resolution, num_fp16_res)
        # True: every block in float32 whatever num_fp16_res (the official force_fp32; exports).
        self.force_fp32 = False
        self.style_mixing_prob, self.w_avg_beta = float(style_mixing_prob), float(w_avg_beta)
        self.resample, self.num_classes = resample, num_classes
        self.resolutions = [2 ** i for i in range(2, int(math.log2(resolution)) + 1)]
        self.num_ws = 2 * len(self.resolutions)
        self.mapping_network = MappingNetwork(latent_dim, w_dim, mapping_layers, mapping_lr_mult, num_classes,
                                              embed_features=embed_features, layer_features=layer_features)
        self.register_buffer("w_avg", torch.zeros(w_dim))
        self.register_buffer("resample_filter", setup_filter(), persistent=False)
        self.const = nn.Parameter(torch.randn(nf(4), 4, 4))
        self.convs = nn.ModuleDict()
        self.to_rgb = nn.ModuleDict()
        self.skips = nn.ModuleDict()  # "resnet" only; empty (no checkpoint keys) otherwise
        for res in self.resolutions:
            c = nf(res)
            layers = [ModulatedConv(c, c, w_dim, res, modconv=modconv, clamp=conv_clamp)]
            if res > 4:
                layers.insert(0, ModulatedConv(nf(res // 2), c, w_dim, res, up=True, modconv=modconv,
                                               resample=resample, clamp=conv_clamp))
                if architecture == "resnet":
                    self.skips[str(res)] = EqualizedConv2d(nf(res // 2), c, 1, bias=False, up=True, resample=resample)
            self.convs[str(res)] = nn.ModuleList(layers)
            if architecture == "skip" or res == resolution:
                self.to_rgb[str(res)] = ModulatedConv(c, channels, w_dim, res, kernel=1, demodulate=False,
                                                      noise=False, activation=False, modconv=modconv,
                                                      clamp=conv_clamp)

    def mapping(self, z: torch.Tensor, labels: torch.Tensor | None = None, truncation_psi: float = 1.0, *,
                update_w_avg: bool = False) -> torch.Tensor:
        """``z[N, latent_dim]`` (and ``labels[N]``, int64, for a conditional G) ``-> ws[N, num_ws,
        w_dim]``; with ``truncation_psi`` != 1 every W (the first ``truncation_cutoff`` ones when
        that is set) is ``w_avg + psi * (w - w_avg)`` (StyleGAN sec. 3.1 / StyleGAN2 appendix:
        truncation trick). Raises ValueError when a conditional G gets no labels or an
        unconditional one gets some."""
        check_labels(self, self.num_classes, labels, z.shape[0])
        w = self.mapping_network(z, labels)
        if update_w_avg:
            with torch.no_grad():
                # The mean over the global batch, so several processes keep one w_avg, the one
                # a single process would (a collective inside a training iteration only).
                batch_mean = mean_over_processes(w.detach().float().mean(dim=0))
                self.w_avg.copy_(batch_mean.lerp(self.w_avg, self.w_avg_beta))
        ws = w.unsqueeze(1).expand(-1, self.num_ws, -1)
        if truncation_psi == 1:
            return ws
        truncated = self.w_avg.to(w.dtype).lerp(w, float(truncation_psi)).unsqueeze(1)
        k = self.num_ws if self.truncation_cutoff is None else min(self.truncation_cutoff, self.num_ws)
        if k == self.num_ws:
            return truncated.expand(-1, self.num_ws, -1)
        return torch.cat([truncated.expand(-1, k, -1), ws[:, k:]], dim=1)

    def mix_styles(self, ws: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Style-mixing regularisation (StyleGAN sec. 3.1): with probability style_mixing_prob the
        W of a second random z (same labels) replaces ``ws[:, cutoff:]`` from a random cut-off
        layer in [1, num_ws). One cut-off per batch (official code): one draw from the RNG that
        all processes share, so it is the same on each; the second z is a per-sample draw, made
        for the global batch (``batch_randn``). Tensor ops only, so no graph break under
        torch.compile. ``ws[N, num_ws, w_dim]`` -> same shape."""
        n = ws.shape[0]
        z2 = batch_randn(n, self.latent_dim, device=ws.device)
        w2 = self.mapping(z2, labels).to(ws.dtype)
        cutoff = torch.randint(1, self.num_ws, (), device=ws.device)
        mix = torch.rand((), device=ws.device) < self.style_mixing_prob
        cutoff = torch.where(mix, cutoff, torch.full_like(cutoff, self.num_ws))
        layer = torch.arange(self.num_ws, device=ws.device).reshape(1, -1, 1)
        return torch.where(layer >= cutoff, w2, ws)

    def synthesis(self, ws: torch.Tensor, noise_mode: NoiseMode = "random") -> torch.Tensor:
        """``ws[N, num_ws, w_dim] -> images[N, channels, r, r]``: per resolution the convs
        (residual for "resnet"), then for "skip" the skip output ``img = upsample(img) +
        toRGB(x)`` (sec. 4.1, fig. 7b), for "orig" and "resnet" toRGB at the last resolution
        only. Raises ValueError when ws does not hold num_ws layers."""
        if ws.shape[1] != self.num_ws:
            raise ValueError(f"synthesis: expected ws[N, {self.num_ws}, {self.w_dim}], got {tuple(ws.shape)}")
        half = _fp16_enabled(self.num_fp16_res, self.fp16_devices, self.force_fp32, ws.device)
        x = self.const.to(ws.dtype).unsqueeze(0).expand(ws.shape[0], -1, -1, -1)
        img = None
        idx = 0
        for res in self.resolutions:
            key = str(res)
            fp16 = half and res >= self.fp16_resolution
            if half:  # each block casts its input (official); otherwise dtypes flow as computed
                x = x.to(torch.float16 if fp16 else ws.dtype)
            # resnet: skip and last conv each scaled by sqrt(0.5) (the clamp too), then summed, as
            # the official SynthesisBlock, so fp16 blocks round the same way.
            y = self.skips[key](x, math.sqrt(0.5)) if key in self.skips else None
            last = len(self.convs[key]) - 1
            for i, conv in enumerate(self.convs[key]):
                x = conv(x, ws[:, idx], noise_mode, math.sqrt(0.5) if y is not None and i == last else 1.0)
                idx += 1
            if y is not None:
                x = y + x
            if key in self.to_rgb:
                rgb = self.to_rgb[key](x, ws[:, idx])
                if fp16:
                    rgb = rgb.to(ws.dtype)  # the skip image stays float32 (official)
                img = rgb if img is None else self._upsample(img) + rgb
        return img

    def _upsample(self, img: torch.Tensor) -> torch.Tensor:
        if self.resample == "fir":
            return upsample2d(img, self.resample_filter)
        return F.interpolate(img, scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, z: torch.Tensor, labels=None, *, truncation_psi: float = 1.0,
                noise_mode: NoiseMode = "random") -> torch.Tensor:
        """Images ``[N, channels, r, r]`` for ``z[N, latent_dim]``. In training mode it updates
        ``w_avg`` and applies style mixing; in eval mode (G_ema) it does neither. With
        ``noise_mode="random"`` it draws from the global torch RNG. ``labels[N]`` (int64): the
        classes, for a conditional G only (ValueError otherwise, and when one is missing)."""
        ws = self.mapping(z, labels, truncation_psi, update_w_avg=self.training)
        if self.training and self.style_mixing_prob > 0:
            ws = self.mix_styles(ws, labels)
        return self.synthesis(ws, noise_mode)


class DBlock(nn.Module):
    """D block, ``[N, Cin, r, r] -> [N, Cout, r/2, r/2]``: conv0 (3x3), conv1 (3x3, downsampling by
    2; ``resample``: "fir" or "bilinear"). ``architecture`` "resnet" (sec. 4.1, fig. 7c):
    ``(skip(x) + conv1(conv0(x))) / sqrt(2)`` with a 1x1 downsampling skip without bias; "orig" and
    "skip": ``conv1(conv0(x))``. ``from_rgb``: this block adds ``from_rgb(img)`` (img at its
    resolution) to its input first (the "skip" D below its top block). ``conv_clamp``: the
    outputs of conv0, conv1 and from_rgb are clamped to [-conv_clamp, +conv_clamp], the skip's not
    (stylegan2-ada-pytorch's ``DiscriminatorBlock``)."""

    def __init__(self, in_channels: int, out_channels: int, resample: Resample = "fir",
                 conv_clamp: float | None = None, *, architecture: DArchitecture = "resnet",
                 from_rgb_channels: int = 0):
        super().__init__()
        self.from_rgb = (EqualizedConv2d(from_rgb_channels, in_channels, 1, activation=True, clamp=conv_clamp)
                         if from_rgb_channels else None)
        self.conv0 = EqualizedConv2d(in_channels, in_channels, 3, activation=True, clamp=conv_clamp)
        self.conv1 = EqualizedConv2d(in_channels, out_channels, 3, activation=True, down=True, resample=resample,
                                     clamp=conv_clamp)
        self.skip = (EqualizedConv2d(in_channels, out_channels, 1, bias=False, down=True, resample=resample)
                     if architecture == "resnet" else None)

    def forward(self, x, img=None):
        if self.from_rgb is not None:
            x = x + self.from_rgb(img)
        if self.skip is None:
            return self.conv1(self.conv0(x))
        # Each branch scaled by sqrt(0.5) (conv1's clamp too), then summed: the official
        # DiscriminatorBlock's order, so fp16 blocks round the same way.
        return self.skip(x, math.sqrt(0.5)) + self.conv1(self.conv0(x), math.sqrt(0.5))


class Discriminator(nn.Module):
    """StyleGAN2 D: ``images[N, channels, r, r] -> logits[N]``.

    fromRGB (1x1) at full resolution, blocks down to 4x4 (``architecture``, sec. 4.1, fig. 7:
    "resnet" residual blocks, the paper's D; "orig" plain blocks; "skip" plain blocks, each
    below the top one and the 4x4 epilogue adding a fromRGB of the image downsampled to its
    resolution, stylegan2-ada-pytorch's ``DiscriminatorBlock``), minibatch stddev (group
    ``mbstd_group_size``, 0 = off; ``mbstd_num_channels`` appended maps), 3x3 conv, FC, FC to
    one logit.

    ``num_classes`` > 0: ``D(images, labels[N])``. The labels go through a mapping network of
    their own (``cmap_layers`` layers, lr x ``mapping_lr_mult``) to ``cmap[N, cmap_dim]``
    (cmap_dim: None = the 4x4 feature maps); the last FC gives ``cmap_dim`` features instead of
    one logit, and the logit is their projection on cmap, ``sum_k out_k * cmap_k /
    sqrt(cmap_dim)`` (stylegan2-ada-pytorch's ``DiscriminatorEpilogue``: a projection
    discriminator, Miyato & Koyama 2018, with a learned label mapping).

    ``conv_clamp``: the outputs of the block fromRGBs, of every block's two 3x3 convs and of the
    4x4 conv are clamped to [-conv_clamp, +conv_clamp] (stylegan2-ada-pytorch's ``conv_clamp``);
    the 1x1 skips, the epilogue's fromRGB ("skip") and the FC layers are not, as the reference.
    None clamps nothing.

    ``num_fp16_res``: the blocks at resolutions >= ``fp16_resolution(resolution, num_fp16_res)``
    (with their fromRGB and, for "skip", the downsampling of the image they pass on) compute in
    float16, the features and the image cast at each block's entry; the 4x4 epilogue casts back
    and computes in float32 (stylegan2-ada-pytorch's ``DiscriminatorBlock`` /
    ``DiscriminatorEpilogue``). On the devices ``fp16_devices`` names, with no autocast active and
    ``force_fp32`` False, as the Generator's.

    ``set_blur_sigma(sigma)`` (pixels; 0 = none, the default): every input image is first
    blurred by ``d_blur.blur_images`` (StyleGAN3-R's fading blur of D's inputs; the architecture
    sets it from its scheduled ``d_blur_sigma`` before every iteration). Plain attributes, not
    buffers, so checkpoints and imported state dicts are unchanged.
    """

    def __init__(self, resolution: int, channels: int, nf, mbstd_group_size: int = 4, *,
                 resample: Resample = "fir", num_classes: int = 0, cmap_layers: int = 8,
                 mapping_lr_mult: float = 0.01, conv_clamp: float | None = None,
                 architecture: DArchitecture = "resnet", mbstd_num_channels: int = 1, cmap_dim: int | None = None,
                 num_fp16_res: int = 0, fp16_devices: Fp16Devices = "cuda"):
        super().__init__()
        if architecture not in ("resnet", "orig", "skip"):
            raise ValueError(f"Discriminator: architecture must be 'resnet', 'orig' or 'skip', got {architecture!r}")
        self.num_classes = num_classes
        self.conv_clamp = conv_clamp
        self.architecture, self.resample = architecture, resample
        self.num_fp16_res, self.fp16_devices = num_fp16_res, fp16_devices
        self.fp16_resolution = fp16_resolution(resolution, num_fp16_res)
        self.force_fp32 = False  # as Generator.force_fp32
        self.blur_sigma, self.blurs = 0.0, False
        self.from_rgb = EqualizedConv2d(channels, nf(resolution), 1, activation=True, clamp=conv_clamp)
        res = [2 ** i for i in range(int(math.log2(resolution)), 2, -1)]
        self.block_resolutions = res  # each block's input resolution
        skip = architecture == "skip"
        self.blocks = nn.ModuleList(DBlock(nf(r), nf(r // 2), resample, conv_clamp, architecture=architecture,
                                           from_rgb_channels=channels if skip and i else 0)
                                    for i, r in enumerate(res))
        c4 = nf(4)
        # Not clamped, as the reference's epilogue fromRGB.
        self.epilogue_from_rgb = EqualizedConv2d(channels, c4, 1, activation=True) if skip else None
        if skip:
            self.register_buffer("resample_filter", setup_filter(), persistent=False)
        self.mbstd = (MinibatchStddev(mbstd_group_size, mbstd_num_channels) if mbstd_group_size > 0 else None)
        self.conv = EqualizedConv2d(c4 + (mbstd_num_channels if self.mbstd is not None else 0), c4, 3,
                                    activation=True, clamp=conv_clamp)
        self.fc = EqualizedLinear(c4 * 16, c4, activation=True)
        self.cmap_dim = (cmap_dim or c4) if num_classes else 0
        self.mapping = (MappingNetwork(0, self.cmap_dim, cmap_layers, mapping_lr_mult, num_classes)
                        if num_classes else None)
        self.out = EqualizedLinear(c4, self.cmap_dim or 1)

    def set_blur_sigma(self, sigma: float) -> None:
        """Blur every input image by ``sigma`` pixels from now on (``d_blur``; 0 = no blur)."""
        self.blur_sigma = float(sigma)
        # A compiled forward guards on this bool only (two graphs at most), never on sigma.
        self.blurs = blur_taps(self.blur_sigma) is not None

    def input_blocks(self) -> list[nn.Module]:
        """FreezeD's blocks from the input side: fromRGB with the top block, the other blocks
        (with their fromRGBs), then the 4x4 epilogue (its fromRGB, mbstd, conv, fc, out, label
        mapping)."""
        first = nn.ModuleList([self.from_rgb, self.blocks[0]]) if len(self.blocks) else self.from_rgb
        tail = nn.ModuleList(m for m in (self.epilogue_from_rgb, self.conv, self.fc, self.out, self.mapping)
                             if m is not None)
        return [first, *self.blocks[1:], tail]

    def _downsample(self, img: torch.Tensor) -> torch.Tensor:
        if self.resample == "fir":
            return downsample2d(img, self.resample_filter)
        return F.avg_pool2d(img, 2)

    def forward(self, img, labels=None):
        check_labels(self, self.num_classes, labels, img.shape[0])
        if self.blurs:
            img = _blurred(self, img)
        half = _fp16_enabled(self.num_fp16_res, self.fp16_devices, self.force_fp32, img.device)
        dtype = img.dtype
        if half and self.block_resolutions and self.block_resolutions[0] >= self.fp16_resolution:
            img = img.to(torch.float16)  # the top block's fromRGB belongs to it (official)
        x = self.from_rgb(img)
        for block, res in zip(self.blocks, self.block_resolutions):
            if half:  # each block casts its inputs (official); otherwise dtypes flow as computed
                block_dtype = torch.float16 if res >= self.fp16_resolution else dtype
                x, img = x.to(block_dtype), img.to(block_dtype)
            x = block(x, img)
            if self.epilogue_from_rgb is not None:
                img = self._downsample(img)
        if half:  # the epilogue in float32 (official)
            x, img = x.to(dtype), img.to(dtype)
        if self.epilogue_from_rgb is not None:
            x = x + self.epilogue_from_rgb(img)
        if self.mbstd is not None:
            x = self.mbstd(x)
        x = self.conv(x)
        x = self.out(self.fc(x.flatten(1)))
        if self.mapping is None:
            return x.squeeze(1)
        cmap = self.mapping(None, labels).to(x.dtype)
        return (x * cmap).sum(dim=1) * (1.0 / math.sqrt(self.cmap_dim))


@torch.compiler.disable
def _blurred(D: Discriminator, img: torch.Tensor) -> torch.Tensor:
    # Outside any compiled graph: sigma changes every iteration while the blur fades, and so does
    # the filter's length; inside a graph each value would be a recompilation.
    return blur_images(img, D.blur_sigma)


# -------------------------------------------------------------------------------- architecture --


def _positive(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


def _unit(v):
    return None if 0 <= v <= 1 else f"must be in [0, 1], got {v}"


def _clamp_of(value, recipe, num_fp16_res: int = 0) -> float | None:
    """``conv_clamp``'s bound: ``"auto"`` is 256 under the recipe's ``run.precision = "fp16"`` or
    with fp16 blocks (``num_fp16_res`` > 0; stylegan2-ada-pytorch's train.py: ``conv_clamp = 256``
    with its fp16 layers), else None."""
    if value != "auto":
        return value
    fp16 = num_fp16_res > 0 or (recipe is not None and recipe.run.precision == "fp16")
    return 256.0 if fp16 else None


#: The largest finite fp16 value (torch.finfo(torch.float16).max): a conv_clamp above it bounds
#: nothing under fp16, since an activation overflows to inf before it reaches the bound.
FP16_MAX = 65504.0


class StyleGAN2(Architecture):
    """StyleGAN2 (Karras et al. 2020): mapping network, modulated convs with demodulation, noise, skip G, residual D (or the paper's orig/skip/resnet variants), FIR resampling; static resolution; class-conditional."""

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
        resample: Literal["fir", "bilinear"] = option(
            "fir", help='Up- and downsampling: "fir" (the [1, 3, 3, 1] low-pass filter of the paper\'s code, '
                        'upfirdn2d) or "bilinear" (bilinear up, 2x2 box filter down).')
        g_architecture: GArchitecture = option(
            "skip", help='G\'s architecture (StyleGAN2 sec. 4.1, fig. 7): "skip" (the paper\'s: a toRGB at every '
                         'resolution, their outputs upsampled and summed), "orig" (one toRGB, at the last '
                         'resolution) or "resnet" (one toRGB at the last resolution, residual blocks with a 1x1 '
                         'upsampling skip, summed times sqrt(0.5)).')
        d_architecture: DArchitecture = option(
            "resnet", help='D\'s architecture (StyleGAN2 sec. 4.1, fig. 7): "resnet" (the paper\'s: residual '
                           'blocks with a 1x1 downsampling skip), "orig" (plain blocks, one fromRGB at the input) '
                           'or "skip" (plain blocks, a fromRGB of the downsampled image added at every block and '
                           'at the 4x4 epilogue).')
        d_channel_base: int | None = option(
            None, help="D's channel_base (feature maps at resolution r: min(d_channel_base // r, d_channel_max)); "
                       "None = channel_base, as every official config.", min=1)
        d_channel_max: int | None = option(None, help="D's channel_max; None = channel_max.", min=1)
        mbstd_num_channels: int = option(
            1, help="Minibatch-stddev feature maps appended to D's 4x4 features: D's channels split into this many "
                    "groups, one map each (stylegan2-ada-pytorch's mbstd_num_channels; 1 = PGGAN's layer).",
            min=1, max=64)
        truncation_cutoff: int | None = option(
            None, help="Truncation trick (sampling with psi != 1) on the first truncation_cutoff Ws only (the "
                       "coarse layers, StyleGAN sec. 3.1); None = all num_ws Ws.", min=0)
        mapping_embed_features: int | None = option(
            None, help="Class-conditional G: size of the label embedding joined to z; None = w_dim "
                       "(stylegan2-ada-pytorch's embed_features).", min=1)
        mapping_layer_features: int | None = option(
            None, help="Width of the hidden FC layers of G's mapping network (the last gives w_dim); None = w_dim "
                       "(stylegan2-ada-pytorch's layer_features).", min=1)
        d_cmap_dim: int | None = option(
            None, help="Class-conditional D: size of the label mapping the logit is projected on; None = D's 4x4 "
                       "feature maps (stylegan2-ada-pytorch's cmap_dim).", min=1)
        # The official rule (stylegan2-ada-pytorch, Karras et al. 2020b): the top num_fp16_res
        # blocks in float16, trained without loss scaling, with conv_clamp bounding activations.
        # Under autocast (run.precision bf16 / fp16) the autocast precision already covers the
        # whole networks, so the blocks follow it instead: one precision machinery at a time.
        num_fp16_res: int = option(
            0, help="Compute G's and D's blocks at the num_fp16_res highest resolutions in float16 "
                    "(stylegan2-ada-pytorch's num_fp16_res: the blocks at resolutions >= max(2 ** (log2(resolution) + "
                    "1 - num_fp16_res), 8); styles, demodulation, the toRGB skip image, the mapping networks and "
                    "D's 4x4 epilogue stay float32). Only on the devices fp16_devices names, and only when no "
                    "autocast is active: under run.precision = \"bf16\" / \"fp16\" the whole networks follow "
                    "run.precision instead; with \"fp32\" these blocks train in float16 without loss scaling, as "
                    "the official code (conv_clamp \"auto\" is then 256). Exports compute float32 everywhere. "
                    "0 = none (the checkpoint holds the same tensors whatever the value).", min=0, max=32)
        fp16_devices: Fp16Devices = option(
            "cuda", help='Where the num_fp16_res blocks compute in float16: "cuda" (CUDA devices only, float32 '
                         'elsewhere: the StyleGAN3 repository\'s networks_stylegan2) or "all" (also on the CPU: '
                         'stylegan2-ada-pytorch\'s networks, whose snapshots draw their images that way).')
        d_mapping_layers: int = option(8, help="Class-conditional D (architecture.conditional): FC layers of its "
                                               "label mapping network, whose output the logit is projected on "
                                               "(stylegan2-ada-pytorch: 8; TF-era StyleGAN2-ADA: 0, the normalised "
                                               "label embedding itself).",
                                       validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")
        d_mapping_lr_mult: float | None = option(
            None, help="Class-conditional D: learning-rate multiplier of its label mapping network; none = "
                       "mapping_lr_mult (stylegan2-ada-pytorch: the same 0.01; TF-era StyleGAN2-ADA: 0.1).",
            min=0, min_exclusive=True)
        # "auto" follows stylegan2-ada-pytorch's train.py, the setting StyleGAN2 researchers know:
        # conv_clamp = 256 exactly when fp16 layers exist (--fp32 turns both off). It reads the
        # recipe's run.precision, never the device ("auto" precision is bf16 or fp32, not fp16),
        # and is resolved when the recipe loads (resolved_options): the recipe a run saves holds
        # the bound, so resume, sample and export build the same function even if a resume
        # changes run.precision; fp32 and bf16 recipes (and their checkpoints) are unchanged by it.
        conv_clamp: float | Literal["auto"] | None = option(
            "auto", help="Clamp the output of every synthesis layer, ToRGB layer and D conv layer (after bias, "
                         "activation and gain; not the mapping networks, D's 1x1 skips or FC layers) to "
                         "[-conv_clamp, +conv_clamp], so fp16 activations cannot overflow (stylegan2-ada-pytorch's "
                         'conv_clamp). "auto" = 256 under run.precision = "fp16" or with num_fp16_res > 0 '
                         '(the reference\'s setting with its fp16 layers), none otherwise; none = no clamp. Under fp16 at most 65504 (the largest fp16 '
                         "number). Part of the network's function: G_ema is clamped when sampled and exported too.",
            min=0, min_exclusive=True,
            hint="e.g. conv_clamp = 256 (stylegan2-ada-pytorch's); \"none\" = no clamp")

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
        if o.d_channel_base is not None and o.d_channel_base < recipe.resolution:
            yield "d_channel_base", (f"gives D no feature maps at resolution {recipe.resolution} "
                                     f"(use d_channel_base >= {recipe.resolution}, or none for channel_base)")
        c4 = min((o.channel_base if o.d_channel_base is None else o.d_channel_base) // 4,
                 o.channel_max if o.d_channel_max is None else o.d_channel_max)
        if o.mbstd_group_size > 0 and c4 % o.mbstd_num_channels:
            yield "mbstd_num_channels", (f"{o.mbstd_num_channels} does not divide D's {c4} feature maps at 4x4 "
                                         f"(choose a divisor of {c4}, e.g. 1)")
        c = o.conv_clamp
        if recipe.run.precision == "fp16" and isinstance(c, float) and c > FP16_MAX:
            yield "conv_clamp", (f"{c:g} is above {FP16_MAX:g}, the largest fp16 number, so under run.precision = "
                                 f"\"fp16\" it bounds nothing (an activation overflows to inf first); use at most "
                                 f"{FP16_MAX:g}, e.g. conv_clamp = 256 (stylegan2-ada-pytorch's), or \"auto\"")
        g = o.mbstd_group_size
        batch = getattr(recipe.growth.options, "batch_size", None)
        if g > 0 and isinstance(batch, int) and batch >= g and batch % g:
            yield "mbstd_group_size", (f"group size {g} does not divide the batch size {batch} "
                                       f"(choose a batch that is a multiple of {g}, or another group size)")

    @classmethod
    def resolved_options(cls, o, recipe):
        return attrs.evolve(o, conv_clamp=_clamp_of(o.conv_clamp, recipe, o.num_fp16_res))

    def batch_problem(self, batch: int, world_size: int = 1) -> str | None:
        return mbstd_batch_problem(self.options.mbstd_group_size, batch, world_size)

    def nf(self, res: int) -> int:
        """G's feature maps at resolution ``res``: min(channel_base // res, channel_max)."""
        o = self.options
        return int(min(o.channel_base // res, o.channel_max))

    def d_nf(self, res: int) -> int:
        """D's feature maps at resolution ``res`` (d_channel_base and d_channel_max, None = G's)."""
        o = self.options
        base = o.channel_base if o.d_channel_base is None else o.d_channel_base
        top = o.channel_max if o.d_channel_max is None else o.d_channel_max
        return int(min(base // res, top))

    supports_truncation = True
    supports_conditional = True
    supports_spectral_norm = False  # its layers apply the equalized learning rate themselves

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    @property
    def conv_clamp(self) -> float | None:
        """The clamp the networks are built with: the option (a loaded recipe holds it
        resolved), "auto" resolved to 256 under ``run.precision = "fp16"`` (the recipe's,
        ``self.context.recipe``) or with ``num_fp16_res`` > 0, and to None otherwise (also when
        built without a recipe)."""
        return _clamp_of(self.options.conv_clamp, self.context.recipe, self.options.num_fp16_res)

    def export_view(self, G: nn.Module) -> nn.Module:
        # The "scaled" modulated convolution is the same formula with one shared-weight conv, so
        # the traced graph does not bake the batch size into a grouped convolution.
        view = copy.deepcopy(G)
        # float32 everywhere (the official force_fp32): a trace of the fp16 blocks would bake the
        # casts of the tracing device into a graph that runtimes without fp16 kernels run.
        view.force_fp32 = True
        for module in view.modules():
            if isinstance(module, ModulatedConv):
                module.modconv = "scaled"
        return view

    def build(self, resolution, channels):
        o = self.options
        k = self.context.num_classes
        G = Generator(resolution, channels, o.latent_dim, o.w_dim, self.nf, mapping_layers=o.mapping_layers,
                      mapping_lr_mult=o.mapping_lr_mult, style_mixing_prob=o.style_mixing_prob,
                      w_avg_beta=o.w_avg_beta, modconv=o.modconv, resample=o.resample, num_classes=k,
                      conv_clamp=self.conv_clamp, architecture=o.g_architecture,
                      truncation_cutoff=o.truncation_cutoff, embed_features=o.mapping_embed_features,
                      layer_features=o.mapping_layer_features, num_fp16_res=o.num_fp16_res,
                      fp16_devices=o.fp16_devices)
        D = Discriminator(resolution, channels, self.d_nf, o.mbstd_group_size, resample=o.resample, num_classes=k,
                          cmap_layers=o.d_mapping_layers,
                          mapping_lr_mult=o.mapping_lr_mult if o.d_mapping_lr_mult is None else o.d_mapping_lr_mult,
                          conv_clamp=self.conv_clamp, architecture=o.d_architecture,
                          mbstd_num_channels=o.mbstd_num_channels, cmap_dim=o.d_cmap_dim,
                          num_fp16_res=o.num_fp16_res, fp16_devices=o.fp16_devices)
        return G, D
