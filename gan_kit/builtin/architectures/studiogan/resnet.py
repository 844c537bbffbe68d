"""StudioGAN's ResNet GAN (PyTorch-StudioGAN ``src/models/resnet.py``): the ``sngan-resnet``
architecture (SNGAN, Miyato et al. 2018, appendix B.4 / Miyato & Koyama 2018, the class-
conditional form) and its preset ``sagan`` (SAGAN, Zhang et al. 2019: the same network with
spectral norm in G too and self-attention; StudioGAN's ``SAGAN.yaml``). The residual blocks and D
are shared with ``biggan`` (``studiogan.biggan``).

G: a linear map of z to ``[N, m0 * g_conv_dim, 4, 4]``, residual up-blocks (each: BN, ReLU,
nearest 2x upsampling, 3x3 conv, BN, ReLU, 3x3 conv; the shortcut upsampled and a 1x1 conv), a
last BN, ReLU, 3x3 conv to the image and tanh. Class-conditional: every block's BN is a
``ConditionalBatchNorm2d`` of the one-hot class (SNGAN's cBN); unconditional: a BN with its own
affine map. D: residual down-blocks (the first convolves before its ReLU, as SNGAN's "optimized"
block; the others are pre-activation; 2x2 average pooling where they halve the resolution), a
ReLU, a sum over positions (``features``), then a linear layer to the logit plus the projection
term ``embed(y) . h`` (Miyato & Koyama 2018, eq. 3; ``head``). Widths per block come from
StudioGAN's tables for 32 to 512 px (``layers.G_MULTIPLIERS`` / ``D_MULTIPLIERS``; 16 px, not
StudioGAN's: its 32 px networks less one block) times ``g_conv_dim`` / ``d_conv_dim``. Self-attention (``layers.SelfAttention``) after the G and D
blocks named in ``g_attention`` / ``d_attention`` (1-based, StudioGAN's ``attn_g_loc`` /
``attn_d_loc``). Spectral norm (``layers.SpectralNorm``) on every conv, linear and embedding
layer of G (``g_spectral_norm``; the cBN maps included) and of D (``d_spectral_norm``); a D
without it has batch norm in its blocks instead, as StudioGAN's.

One StudioGAN detail kept on purpose (docs/architectures.md): its D blocks after the first apply
their first ReLU in place, which with spectral norm (no BN before it) also rewrites the tensor the
shortcut reads, so the shortcut sees ``relu(x)``; gankit computes the same, so StudioGAN's weights
give StudioGAN's logits. tests/test_studiogan_parity.py checks G and D against StudioGAN's code.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import Architecture, option
from gan_kit.builtin.architectures.conditioning import ConditionalBatchNorm2d, check_labels
from gan_kit.builtin.architectures.studiogan.layers import (D_DOWNSAMPLE, D_MULTIPLIERS, G_MULTIPLIERS, RESOLUTIONS,
                                                            SelfAttention, spectral_norm)

__all__ = ["GBlock", "DBlock", "Generator", "Discriminator", "ResNetGANArchitecture", "SNGANResNet", "SAGAN",
           "g_widths", "d_widths",
           "resnet_problems", "multipliers_help", "g_synthesis", "BN_EPS"]

#: The eps of every batch norm in StudioGAN's ResNets (``ops.batchnorm_2d``).
BN_EPS = 1e-4


def _conv(cin: int, cout: int, k: int, sn: bool) -> nn.Conv2d:
    return spectral_norm(nn.Conv2d(cin, cout, k, padding=k // 2), sn)


def _embedding(num: int, dim: int) -> nn.Embedding:
    """A class embedding initialised orthogonally (StudioGAN's default ``ortho`` init; the recipe's
    initializer sees only conv and linear layers)."""
    e = nn.Embedding(num, dim)
    nn.init.orthogonal_(e.weight)
    return e


def _g_bn(channels: int, cond_dim: int, sn: bool) -> nn.Module:
    if not cond_dim:
        return nn.BatchNorm2d(channels, eps=BN_EPS)
    bn = ConditionalBatchNorm2d(channels, cond_dim, eps=BN_EPS, momentum=0.1)
    spectral_norm(bn.gain, sn)
    spectral_norm(bn.bias, sn)
    return bn


class GBlock(nn.Module):
    """G's residual up-block ``[N, cin, H, W] -> [N, cout, 2H, 2W]``: ``conv2(relu(bn2(conv1(up(
    relu(bn1(x)))))) + skip(up(x))``, ``up`` nearest 2x. ``cond_dim`` > 0: the BNs are
    ``ConditionalBatchNorm2d`` of ``y[N, cond_dim]``; 0: plain BNs with affine maps, ``y`` None."""

    def __init__(self, cin: int, cout: int, cond_dim: int, sn: bool):
        super().__init__()
        self.bn1 = _g_bn(cin, cond_dim, sn)
        self.conv1 = _conv(cin, cout, 3, sn)
        self.bn2 = _g_bn(cout, cond_dim, sn)
        self.conv2 = _conv(cout, cout, 3, sn)
        self.skip = _conv(cin, cout, 1, sn)

    def _bn(self, bn: nn.Module, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        return bn(x) if y is None else bn(x, y)

    def forward(self, x, y=None):
        h = F.interpolate(F.relu(self._bn(self.bn1, x, y)), scale_factor=2, mode="nearest")
        h = self.conv2(F.relu(self._bn(self.bn2, self.conv1(h), y)))
        return h + self.skip(F.interpolate(x, scale_factor=2, mode="nearest"))


class DBlock(nn.Module):
    """D's residual block ``[N, cin, H, W] -> [N, cout, H', W']`` (H' = H/2 when ``downsample``).

    ``first`` (StudioGAN's ``DiscOptBlock``, always downsampling): ``pool(conv2(relu(conv1(x))))
    + skip(pool(x))``. Otherwise pre-activation: ``pool(conv2(relu(conv1(relu(x))))) + s`` with
    ``s = pool(skip(relu(x)))`` when the width or size changes, else ``relu(x)`` (the shortcut
    reads the activated input: module docstring). Without spectral norm (``sn`` False) the blocks
    hold StudioGAN's batch norms (``bn1`` before the first ReLU - after ``conv1`` in a first block
    -, ``bn2`` before the second, ``bn0`` on the shortcut) and the shortcut reads ``x`` itself."""

    def __init__(self, cin: int, cout: int, sn: bool, downsample: bool, first: bool = False):
        super().__init__()
        self.sn, self.first, self.downsample = sn, first, downsample or first
        self.conv1 = _conv(cin, cout, 3, sn)
        self.conv2 = _conv(cout, cout, 3, sn)
        self.skip = _conv(cin, cout, 1, sn) if first or downsample or cin != cout else None
        if not sn:
            if self.skip is not None:
                self.bn0 = nn.BatchNorm2d(cin, eps=BN_EPS)
            self.bn1 = nn.BatchNorm2d(cout if first else cin, eps=BN_EPS)
            if not first:
                self.bn2 = nn.BatchNorm2d(cout, eps=BN_EPS)

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 2) if self.downsample else x

    def forward(self, x):
        if self.first:
            h = self.conv1(x)
            h = self._pool(self.conv2(F.relu(h if self.sn else self.bn1(h))))
            s = F.avg_pool2d(x, 2)
            return h + self.skip(s if self.sn else self.bn0(s))
        a = F.relu(x) if self.sn else F.relu(self.bn1(x))
        shortcut = a if self.sn else x
        h = self.conv1(a)
        h = self._pool(self.conv2(F.relu(h if self.sn else self.bn2(h))))
        if self.skip is None:
            return h + shortcut
        return h + self._pool(self.skip(shortcut if self.sn else self.bn0(shortcut)))


def g_widths(resolution: int, conv_dim: int, multipliers: tuple[int, ...] = ()) -> list[int]:
    """G's channels at each block boundary, 4 px first: ``multipliers`` (StudioGAN's table for
    ``resolution`` when empty) times ``conv_dim``."""
    return [m * conv_dim for m in (multipliers or G_MULTIPLIERS[resolution])]


def d_widths(resolution: int, conv_dim: int, multipliers: tuple[int, ...] = ()) -> list[int]:
    """D's output channels per block, input side first (as ``g_widths``)."""
    return [m * conv_dim for m in (multipliers or D_MULTIPLIERS[resolution])]


class Generator(nn.Module):
    """SNGAN / SAGAN G: ``z[N, latent_dim] -> images[N, channels, r, r]`` in (-1, 1); ``G(z,
    labels[N])`` when ``num_classes`` > 0 (cBN of the one-hot class). ``widths``: channels at each
    block boundary, 4 px first (``len(widths) - 1`` blocks); ``attention``: 1-based blocks followed
    by self-attention; ``sn``: spectral norm on every weight layer."""

    def __init__(self, resolution: int, channels: int, latent_dim: int, widths: list[int],
                 attention: tuple[int, ...] = (), sn: bool = False, num_classes: int = 0):
        super().__init__()
        self.resolution, self.latent_dim, self.num_classes, self.width = resolution, latent_dim, num_classes, widths[0]
        self.linear = spectral_norm(nn.Linear(latent_dim, widths[0] * 16), sn)
        self.blocks = _g_blocks(widths, num_classes, attention, sn)
        self.bn = nn.BatchNorm2d(widths[-1], eps=BN_EPS)
        self.to_rgb = _conv(widths[-1], channels, 3, sn)

    def forward(self, z, labels=None):
        check_labels(self, self.num_classes, labels, z.shape[0])
        y = None if labels is None else F.one_hot(labels, self.num_classes).to(z.dtype)
        return g_synthesis(self, self.linear(z).view(-1, self.width, 4, 4), [y] * len(self.blocks))


def _g_blocks(widths: list[int], cond_dim: int, attention: tuple[int, ...], sn: bool) -> nn.ModuleList:
    blocks: list[nn.Module] = []
    for i in range(len(widths) - 1):
        blocks.append(GBlock(widths[i], widths[i + 1], cond_dim, sn))
        if i + 1 in attention:
            blocks.append(SelfAttention(widths[i + 1], sn))
    return nn.ModuleList(blocks)


def g_synthesis(G: nn.Module, x: torch.Tensor, ys: list) -> torch.Tensor:
    """G's layers after the 4x4 input ``x``: ``G.blocks`` (residual block ``i`` conditioned on
    ``ys[i]``, self-attention layers between), then ``G.bn``, ReLU, ``G.to_rgb`` and tanh."""
    ys = iter(ys)
    for block in G.blocks:
        x = block(x) if isinstance(block, SelfAttention) else block(x, next(ys))
    return torch.tanh(G.to_rgb(F.relu(G.bn(x))))


class Discriminator(nn.Module):
    """StudioGAN's ResNet D (``resnet.py`` and ``big_resnet.py`` alike): ``images[N, C, r, r] ->
    logits[N]``, ``D(images, labels[N])`` when ``num_classes`` > 0 (projection D).

    ``features(images) -> h[N, widths[-1]]``: the blocks, ReLU, sum over positions. ``head(h,
    labels) -> logits[N]``: ``linear(h)`` plus, when conditional, ``sum(embed(labels) * h)``
    (Miyato & Koyama 2018, eq. 3). ``forward = head(features(x), labels)``; another head (an
    auxiliary classifier) can read ``features``. ``widths``: output channels per block, input side
    first; ``downsample``: which blocks halve the size (the first always does)."""

    def __init__(self, resolution: int, channels: int, widths: list[int], downsample: tuple[bool, ...],
                 attention: tuple[int, ...] = (), sn: bool = True, num_classes: int = 0):
        super().__init__()
        self.resolution, self.num_classes = resolution, num_classes
        blocks: list[nn.Module] = []
        cin = channels
        for i, (cout, down) in enumerate(zip(widths, downsample)):
            blocks.append(DBlock(cin, cout, sn, down, first=i == 0))
            if i + 1 in attention:
                blocks.append(SelfAttention(cout, sn))
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.linear = spectral_norm(nn.Linear(cin, 1), sn)
        self.embed = spectral_norm(_embedding(num_classes, cin), sn) if num_classes else None

    def input_blocks(self) -> list[nn.Module]:
        """The blocks from the input side (self-attention layers count as blocks)."""
        return list(self.blocks)

    def features(self, img: torch.Tensor) -> torch.Tensor:
        """``images[N, C, r, r] -> h[N, widths[-1]]``: the blocks, ReLU, sum over positions."""
        h = img
        for block in self.blocks:
            h = block(h)
        return F.relu(h).sum(dim=(2, 3))

    def head(self, h: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """``h[N, K] -> logits[N]``: the linear layer, plus the projection term when conditional."""
        out = self.linear(h).squeeze(1)
        if self.embed is None:
            return out
        return out + (self.embed(labels).to(h.dtype) * h).sum(dim=1)

    def forward(self, img, labels=None):
        check_labels(self, self.num_classes, labels, img.shape[0])
        return self.head(self.features(img), labels)


def multipliers_help(net: str, table: dict) -> str:
    """The help text of a ``*_channel_multipliers`` option."""
    return (f"{net}'s channels per block as multiples of {net.lower()}_conv_dim; empty = StudioGAN's table for the "
            f"resolution (" + "; ".join(f"{r} px: {', '.join(map(str, m))}" for r, m in table.items()) + ")"
            + (" - one more than G's blocks: the 4 px input first." if net == "G" else ", input side first."))


def resnet_problems(o, recipe, name: str):
    """The recipe checks shared by ``sngan-resnet``, ``sagan`` and ``biggan``: (key, message) pairs."""
    if recipe.growth.name != "static":
        yield "growth.name", f"{name} does not grow: use [growth] name = \"static\", not {recipe.growth.name!r}"
    if recipe.init.name == "equalized-lr":
        yield "init.name", (f"{name} normalises its layers by spectral norm, which makes the equalized learning "
                            f"rate meaningless; use [init] name = \"orthogonal\" (StudioGAN's default)")
    res = recipe.resolution
    if res not in RESOLUTIONS:
        yield "", (f"{name} is defined for data.resolution {', '.join(map(str, RESOLUTIONS))} (StudioGAN's 32 to "
                   f"512, and 16), got {res}")
        return
    for key, table, attn_key, offset in (("g_channel_multipliers", G_MULTIPLIERS, "g_attention", 1),
                                         ("d_channel_multipliers", D_MULTIPLIERS, "d_attention", 0)):
        mult = getattr(o, key) or table[res]
        if len(mult) != len(table[res]):
            yield key, (f"{len(mult)} multipliers; {res} px needs {len(table[res])} (StudioGAN's: "
                        f"{', '.join(map(str, table[res]))})")
            continue
        conv = o.g_conv_dim if offset else o.d_conv_dim
        blocks = len(mult) - offset
        for i in getattr(o, attn_key):
            if i < 1 or conv < 1:
                continue  # the option's range check says it
            if i > blocks:
                yield attn_key, f"block {i} does not exist: {res} px has blocks 1 to {blocks}"
            elif (mult[i - 1 + offset] * conv) % 8:
                yield attn_key, (f"self-attention after block {i} needs its {mult[i - 1 + offset] * conv} channels "
                                 f"to be a multiple of 8")


class ResNetGANArchitecture(Architecture):
    """What StudioGAN's ResNet GANs (``sngan-resnet``, ``sagan``, ``biggan``) share: their own
    spectral norm, class conditioning, one D forward per batch, and D (``Discriminator``) built
    from the options ``d_conv_dim``, ``d_channel_multipliers``, ``d_attention``, ``d_spectral_norm``."""

    supports_conditional = True
    supports_spectral_norm = False
    spectral_norm_reason = ("it normalises its own layers as StudioGAN does (options g_spectral_norm and "
                            "d_spectral_norm)")

    #: D's real and fake batches take a forward each, as StudioGAN's loop runs them: each
    #: training forward runs one power iteration of every spectral norm, so one joint forward
    #: would not give the same numbers as two.
    joint_d_forward = False

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def discriminator(self, resolution: int, channels: int) -> "Discriminator":
        """D for ``resolution`` px images of ``channels`` channels, from the options."""
        o = self.options
        return Discriminator(resolution, channels, d_widths(resolution, o.d_conv_dim, o.d_channel_multipliers),
                             D_DOWNSAMPLE[resolution], tuple(o.d_attention), o.d_spectral_norm,
                             num_classes=self.context.num_classes)


class SNGANResNet(ResNetGANArchitecture):
    """StudioGAN's ResNet GAN (SNGAN): cBN residual G, spectrally normalised residual D with a projection head; optional self-attention; static resolution."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(128, help="Size of the latent z (StudioGAN's z_dim: 128).", min=1, max=4096)
        g_conv_dim: int = option(64, help="G's base width: block widths are multiples of it (StudioGAN's "
                                          "g_conv_dim: 64).", min=1, max=4096)
        d_conv_dim: int = option(64, help="D's base width (StudioGAN's d_conv_dim: 64).", min=1, max=4096)
        g_channel_multipliers: tuple[int, ...] = option((), help=multipliers_help("G", G_MULTIPLIERS), min=1,
                                                        max=64)
        d_channel_multipliers: tuple[int, ...] = option((), help=multipliers_help("D", D_MULTIPLIERS), min=1,
                                                        max=64)
        g_attention: tuple[int, ...] = option((), help="G blocks (1-based) followed by self-attention (StudioGAN's "
                                                       "attn_g_loc; SAGAN's CIFAR-10 config: 2). Empty: none.",
                                              min=1, max=16)
        d_attention: tuple[int, ...] = option((), help="D blocks (1-based, input side first) followed by "
                                                       "self-attention (attn_d_loc; SAGAN: 1). Empty: none.",
                                              min=1, max=16)
        g_spectral_norm: bool = option(False, help="Spectral norm on every G conv / linear layer, the cBN maps "
                                                   "included (StudioGAN's apply_g_sn; SNGAN: false).")
        d_spectral_norm: bool = option(True, help="Spectral norm on every D layer, the projection embedding "
                                                  "included (apply_d_sn); false puts batch norm in D's blocks.")

    @classmethod
    def problems(cls, o, recipe):
        yield from resnet_problems(o, recipe, "sngan-resnet")

    def build(self, resolution, channels):
        o, k = self.options, self.context.num_classes
        G = Generator(resolution, channels, o.latent_dim, g_widths(resolution, o.g_conv_dim, o.g_channel_multipliers),
                      tuple(o.g_attention), o.g_spectral_norm, num_classes=k)
        return G, self.discriminator(resolution, channels)


class SAGAN(SNGANResNet):
    """SAGAN as StudioGAN builds it: sngan-resnet with spectral norm in G too and self-attention after G block 2 and D block 1 (StudioGAN's SAGAN.yaml)."""

    @attrs.frozen
    class Options(SNGANResNet.Options):
        g_attention: tuple[int, ...] = option((2,), help="G blocks (1-based) followed by self-attention "
                                                         "(StudioGAN's SAGAN config: 2).", min=1, max=16)
        d_attention: tuple[int, ...] = option((1,), help="D blocks (1-based, input side first) followed by "
                                                         "self-attention (SAGAN config: 1).", min=1, max=16)
        g_spectral_norm: bool = option(True, help="Spectral norm on every G conv / linear layer, the cBN maps "
                                                  "included (SAGAN: true).")

    @classmethod
    def problems(cls, o, recipe):
        yield from resnet_problems(o, recipe, "sagan")

