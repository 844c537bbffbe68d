"""The progressive-growing GAN architecture (Karras et al. 2018, "Progressive Growing of GANs for
Improved Quality, Stability, and Variation", table 2 and sections 2-4).

Every block, toRGB and fromRGB layer exists from construction; ``set_phase(resolution, alpha)``
chooses how much of the network runs. Parameters therefore never change identity when the
network grows: the optimizers keep their state and G_ema keeps averaging.
"""

from __future__ import annotations

import math

import attrs
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module  # the global forward hooks

from gan_kit import Architecture, Growable, hookimpl, option, set_init_gain
from gan_kit.builtin.architectures.conditioning import ClassEmbedding, check_labels, projection, projection_embedding


class PixelNorm(nn.Module):
    """Pixelwise feature normalisation (sec. 4.2): x / sqrt(mean_c(x^2) + eps)."""

    def __init__(self, eps: float = 1e-8):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(dim=1, keepdim=True) + self.eps)


class MinibatchStddev(nn.Module):
    """Minibatch standard deviation (sec. 3): appends ``num_channels`` feature maps holding, for
    each sample, the average over its channel group, H and W of the feature std within the
    sample's group of samples.

    Grouping follows the official code: a batch of N = G * M is viewed as [G, M, ...], so sample
    n belongs to group ``n % M`` (groups are strided, not contiguous), with G = min(group_size,
    N). ``N`` must be divisible by G; raises ValueError otherwise. ``num_channels`` = F > 1
    (stylegan2-ada-pytorch's ``mbstd_num_channels``): the C channels are split into F contiguous
    groups of C / F and each gives one appended map (C must be divisible by F).

    ``splits`` > 1: the batch is ``splits`` batches concatenated (e.g. reals then fakes, for one D
    forward where there were two) and each is grouped on its own exactly as above, so the output
    equals that of ``splits`` separate calls, and no group mixes reals with fakes.
    """

    def __init__(self, group_size: int = 4, num_channels: int = 1):
        super().__init__()
        self.group_size = group_size
        self.num_channels = num_channels

    def forward(self, x, splits: int = 1):
        n, c, h, w = x.shape
        if splits < 1 or n % splits:
            raise ValueError(f"minibatch stddev: batch {n} does not split into {splits} equal parts")
        part = n // splits
        g = min(self.group_size, part)
        if part % g:
            raise ValueError(f"minibatch stddev: batch {part} is not divisible by group size {g}")
        f = self.num_channels
        if c % f:
            raise ValueError(f"minibatch stddev: {c} channels do not split into {f} groups")
        y = x.float().reshape(splits, g, part // g, f, c // f, h, w)
        y = y - y.mean(dim=1, keepdim=True)
        std = torch.sqrt(y.square().mean(dim=1) + 1e-8)  # [splits, M, F, C / F, H, W]
        s = std.mean(dim=(3, 4, 5))  # [splits, M, F]
        s = s.unsqueeze(1).expand(splits, g, part // g, f).reshape(n, f, 1, 1).expand(n, f, h, w).to(x.dtype)
        return torch.cat([x, s], dim=1)


def mbstd_batch_problem(group: int, batch: int, world_size: int = 1) -> str | None:
    """Why minibatch stddev with ``group`` cannot take a per-process batch of ``batch`` images
    with ``world_size`` processes, or None. One process may take a batch below the group size (the
    group shrinks to the batch, as in the official code); several may not, since their groups
    would then differ from one process's."""
    if group > 0 and batch >= group and batch % group:
        return f"mbstd_group_size {group} does not divide the batch {batch}"
    if group > 0 and world_size > 1 and batch < group:
        return (f"mbstd_group_size {group} is larger than the per-process batch {batch}, so minibatch-stddev "
                f"groups would differ from one process's (use a global batch of at least {group * world_size})")
    return None


def _conv(cin, cout, k, gain=None):
    layer = nn.Conv2d(cin, cout, k, padding=k // 2)
    return set_init_gain(layer, gain) if gain is not None else layer


def _lrelu(x):
    return F.leaky_relu(x, 0.2)


def _blend(net) -> bool:
    """Whether ``net`` (G or D) computes its fade-in blend. At alpha = 1 the blend is the new
    path exactly (``torch.lerp`` returns ``end - (end - start) * 0``) and the old path's gradients
    are exactly 0, so eager code skips it once ``set_phase`` said alpha >= 1 (the old toRGB /
    fromRGB then get no gradient instead of a zero one). Under torch.compile it always blends,
    with alpha a tensor, so the fade -> stabilise switch reuses the compiled graphs (the compiled
    lerp costs little); ``is_compiling`` comes first so no guard on ``stable`` is installed."""
    return torch.compiler.is_compiling() or not net.stable


def _lrelu_(x):
    """Leaky ReLU (slope 0.2) in place, for a fresh layer output no backward needs: a conv or
    linear layer saves its input and weight, not its output, so overwriting the output changes no
    gradient (the activation saves its result, whose sign is the input's for a positive slope,
    and first and second derivatives follow from it). Same values as ``_lrelu``; one
    ``[N, C, H, W]`` tensor fewer per layer alive until the backward (speed and peak memory)."""
    return F.leaky_relu_(x, 0.2)


def upsample_conv(conv: nn.Conv2d, x):
    """``conv(F.interpolate(x, scale_factor=2, mode="nearest"))`` for a 3x3 convolution with
    padding 1 (G's first convolution of every block), computed as one transposed convolution with
    stride 2 on the low-resolution ``x[N, C, r, r] -> [N, C', 2r, 2r]``.

    Nearest upsampling is linear, so upsample-then-conv is a 4x4 kernel applied at stride 2: each
    output pixel sees a 2x2 low-resolution neighbourhood, and its weights are sums of the 3x3
    kernel's rows and columns (the official PGGAN code's ``upscale2d_conv2d`` with ``fused_scale``,
    Karras et al. 2018; the same function, so the same math up to float rounding - tested in
    tests/test_speed_equivalence.py). 16 instead of 36 multiply-adds per output pixel and channel
    pair per 2x2 block of output pixels (4 instead of 9 per output pixel), and no upsampled tensor.
    ``conv.weight`` is read through its parametrizations (equalized learning rate, spectral norm).
    Any other convolution, a subclass with its own ``forward``, and a conv with forward hooks
    (feature extraction, the hook-based ``torch.nn.utils.spectral_norm``) take the plain path, so
    the hooks run as they would in ``conv(x)``.
    """
    if not _fusable(conv):
        return conv(F.interpolate(x, scale_factor=2, mode="nearest"))
    # A transposed convolution correlates with the flipped kernel, so flip first (the 2x2 box sum
    # below is symmetric); then sum neighbouring rows and columns of the zero-padded kernel.
    w = F.pad(conv.weight.flip(2, 3), (1, 1, 1, 1))  # [out, in, 5, 5]
    w = w[:, :, 1:] + w[:, :, :-1]
    w = w[:, :, :, 1:] + w[:, :, :, :-1]  # [out, in, 4, 4]
    return F.conv_transpose2d(x, w.transpose(0, 1), conv.bias, stride=2, padding=1)  # weight as [in, out, kh, kw]


def _fusable(conv: nn.Conv2d) -> bool:
    """Whether ``upsample_conv`` may bypass ``conv.forward``: a plain 3x3 / padding 1 convolution
    whose forward is ``nn.Conv2d``'s (parametrized layers qualify: torch subclasses them without a
    forward of their own) and that no forward hook, its own or global, would miss."""
    return (isinstance(conv, nn.Conv2d) and type(conv).forward is nn.Conv2d.forward
            and conv.kernel_size == (3, 3) and conv.padding == (1, 1) and conv.stride == (1, 1)
            and conv.dilation == (1, 1) and conv.groups == 1 and conv.padding_mode == "zeros"
            and not (conv._forward_hooks or conv._forward_pre_hooks
                     or torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks))


class _Progressive(Growable, nn.Module):
    """What G and D share: the resolutions they can run at, the current one, and alpha in a
    buffer (so a compiled graph does not depend on its value)."""

    def set_phase(self, resolution: int, alpha: float) -> None:
        if resolution not in self.resolutions:
            raise ValueError(f"resolution {resolution} not in {self.resolutions}")
        self.resolution = int(resolution)
        self.alpha.fill_(float(alpha))
        self.stable = float(alpha) >= 1.0  # the fade blend is skipped from then on (see _blend)


class Generator(_Progressive):
    """G: ``z[N, latent_dim] -> images[N, channels, r, r]`` at the current phase's resolution r.

    ``num_classes`` > 0: ``G(z, labels[N])``; a learned class vector (``latent_dim`` wide) is
    concatenated to z before the first pixel norm (the class-conditional PGGAN's label input)."""

    def __init__(self, resolution: int, channels: int, latent_dim: int, nf, use_pixelnorm: bool = True,
                 num_classes: int = 0):
        super().__init__()
        self.latent_dim = latent_dim
        self.num_classes = num_classes
        self.embed = ClassEmbedding(num_classes, latent_dim) if num_classes else None
        self.max_resolution = resolution
        self.resolutions = [4 * 2**i for i in range(int(math.log2(resolution)) - 1)]
        self.norm = PixelNorm() if use_pixelnorm else nn.Identity()
        c4 = nf(4)
        self.dense = nn.Linear(latent_dim * (2 if num_classes else 1), c4 * 16)
        set_init_gain(self.dense, math.sqrt(2) / 4)  # official code: gain sqrt(2)/4 for the 4x4 dense
        self.conv4 = _conv(c4, c4, 3)
        self.blocks = nn.ModuleDict()
        self.to_rgb = nn.ModuleDict({"4": _conv(c4, channels, 1, gain=1.0)})
        for res in self.resolutions[1:]:
            cin, cout = nf(res // 2), nf(res)
            self.blocks[str(res)] = nn.ModuleList([_conv(cin, cout, 3), _conv(cout, cout, 3)])
            self.to_rgb[str(res)] = _conv(cout, channels, 1, gain=1.0)
        self.resolution = resolution
        # alpha lives in a tensor so a compiled graph does not depend on its value.
        self.register_buffer("alpha", torch.ones(()))
        # True only after set_phase with alpha >= 1: the fade blend is then skipped (see forward).
        self.stable = False

    def forward(self, z, labels=None):
        check_labels(self, self.num_classes, labels, z.shape[0])
        x = z if self.embed is None else torch.cat([z, self.embed(labels).to(z.dtype)], dim=1)
        x = self.norm(x)
        x = self.norm(_lrelu_(self.dense(x)).reshape(z.shape[0], -1, 4, 4))
        x = self.norm(_lrelu_(self.conv4(x)))
        prev = x
        for res in self.resolutions[1:]:
            if res > self.resolution:
                break
            prev = x
            conv1, conv2 = self.blocks[str(res)]
            x = self.norm(_lrelu_(upsample_conv(conv1, x)))
            x = self.norm(_lrelu_(conv2(x)))
        rgb = self.to_rgb[str(self.resolution)](x)
        if self.resolution > 4 and _blend(self):
            # Fade-in (sec. 2, fig. 2): blend with the previous resolution's image upsampled.
            low = F.interpolate(self.to_rgb[str(self.resolution // 2)](prev), scale_factor=2, mode="nearest")
            rgb = torch.lerp(low, rgb, self.alpha.to(rgb.dtype))
        return rgb


class Discriminator(_Progressive):
    """D: ``images[N, channels, r, r] -> logits[N]`` at the current phase's resolution r.

    ``num_classes`` > 0: ``D(images, labels[N])``, a projection discriminator (Miyato & Koyama
    2018): the logit plus ``embed(labels) . phi`` with phi D's last hidden features."""

    def __init__(self, resolution: int, channels: int, nf, mbstd_group_size: int = 4, num_classes: int = 0):
        super().__init__()
        self.num_classes = num_classes
        self.resolutions = [4 * 2**i for i in range(int(math.log2(resolution)) - 1)]
        self.from_rgb = nn.ModuleDict({str(r): _conv(channels, nf(r), 1) for r in self.resolutions})
        self.blocks = nn.ModuleDict()
        for res in self.resolutions[1:]:
            self.blocks[str(res)] = nn.ModuleList([_conv(nf(res), nf(res), 3), _conv(nf(res), nf(res // 2), 3)])
        c4 = nf(4)
        self.mbstd = MinibatchStddev(mbstd_group_size) if mbstd_group_size > 0 else None
        self.conv4 = _conv(c4 + (1 if self.mbstd else 0), c4, 3)
        self.dense = nn.Linear(c4 * 16, c4)
        self.out = nn.Linear(c4, 1)
        set_init_gain(self.out, 1.0)
        self.embed = projection_embedding(num_classes, c4) if num_classes else None
        self.resolution = resolution
        self.register_buffer("alpha", torch.ones(()))
        self.stable = False  # as in Generator: True after set_phase with alpha >= 1

    def input_blocks(self) -> list[nn.Module]:
        """FreezeD's blocks from the input side at the final resolution: fromRGB (every one, the
        fade-in's too) with the top block, the lower blocks, then the 4x4 epilogue."""
        down = [self.blocks[str(r)] for r in reversed(self.resolutions[1:])]
        tail = nn.ModuleList(m for m in (self.conv4, self.dense, self.out, self.embed) if m is not None)
        return [nn.ModuleList([self.from_rgb, *down[:1]]), *down[1:], tail]

    def forward(self, img, labels=None, splits: int = 1):
        """``img[N, C, r, r] -> logits[N]``. ``splits``: ``img`` is that many equal batches
        concatenated (e.g. ``torch.cat([real, fake])``), whose minibatch-stddev groups stay within
        each one, so the logits equal those of separate forwards (one D call instead of two: the
        caller's choice, see docs/performance.md). ``labels[N]``: for a conditional D."""
        check_labels(self, self.num_classes, labels, img.shape[0])
        res = self.resolution
        x = _lrelu_(self.from_rgb[str(res)](img))
        for r in [r for r in reversed(self.resolutions[1:]) if r <= res]:
            conv1, conv2 = self.blocks[str(r)]
            x = _lrelu_(conv2(_lrelu_(conv1(x))))
            x = F.avg_pool2d(x, 2)
            if r == res and res > 4 and _blend(self):
                # Fade-in of the new fromRGB/block pair, mirrored from G (sec. 2, fig. 2).
                low = _lrelu_(self.from_rgb[str(res // 2)](F.avg_pool2d(img, 2)))
                x = torch.lerp(low, x, self.alpha.to(x.dtype))
        if self.mbstd is not None:
            x = self.mbstd(x, splits)
        x = _lrelu_(self.conv4(x))
        x = _lrelu_(self.dense(x.flatten(1)))
        logits = self.out(x).squeeze(1)
        if self.embed is not None:
            logits = logits + projection(self.embed, labels, x)
        return logits


class PGGAN(Architecture):
    """Progressive-growing G and D (Karras et al. 2018): pixel norm in G, minibatch stddev in D, toRGB/fromRGB per resolution, every block built up front."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(512, help="Size of the latent z.", min=1, max=2**16)
        fmap_base: int = option(8192, help="Feature maps at resolution r: clamp(fmap_base / r, fmap_min, fmap_max).",
                                min=1, max=2**24)
        fmap_max: int = option(512, help="Largest number of feature maps.", min=1, max=2**14)
        fmap_min: int = option(1, help="Smallest number of feature maps.", min=1, max=2**14)
        mbstd_group_size: int = option(4, help="Minibatch-stddev group size (0 disables the layer).",
                                       min=0, max=2**16)
        pixelnorm: bool = option(True, help="Pixelwise feature normalisation in G.")

    @classmethod
    def problems(cls, o, recipe):
        if o.fmap_max < o.fmap_min:
            yield "fmap_min", (f"must be <= fmap_max = {o.fmap_max}, got {o.fmap_min} "
                               f"(lower fmap_min or raise fmap_max)")
        g = o.mbstd_group_size
        if g > 0:
            for res, batch in _batch_sizes(recipe):
                if batch >= g and batch % g:
                    where = f" at resolution {res}" if res else ""
                    yield "mbstd_group_size", (f"group size {g} does not divide the batch size {batch}{where} "
                                               f"(choose a growth.batch_size that is a multiple of {g}, or another group size)")
                    break

    def batch_problem(self, batch: int, world_size: int = 1) -> str | None:
        return mbstd_batch_problem(self.options.mbstd_group_size, batch, world_size)

    joint_d_forward = True
    supports_conditional = True

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def nf(self, res: int) -> int:
        o = self.options
        return int(min(max(o.fmap_base // res, o.fmap_min), o.fmap_max))

    def build(self, resolution, channels):
        o = self.options
        k = self.context.num_classes
        G = Generator(resolution, channels, o.latent_dim, self.nf, o.pixelnorm, num_classes=k)
        D = Discriminator(resolution, channels, self.nf, o.mbstd_group_size, num_classes=k)
        return G, D


def _batch_sizes(recipe):
    """(resolution, per-process batch) pairs of the recipe's growth schedule, best effort."""
    opts = recipe.growth.options
    batch = getattr(opts, "batch_size", None)
    if isinstance(batch, dict):
        return sorted(batch.items())
    if isinstance(batch, int):
        return [(None, batch)]
    return []


@hookimpl
def register_architectures(register):
    register("pggan", PGGAN)
