"""R3GAN (Huang et al. 2024, "The GAN is dead; long live the GAN! A Modern Baseline GAN", NeurIPS
2024, sec. 3 and fig. 3): the ``r3gan`` architecture, a ConvNeXt-style residual G and D.

Both networks are stages of residual blocks at one resolution each, G from 4 px up to the final
resolution and D its mirror. A residual block (sec. 3.2, "inverted bottleneck") is

    x + conv1x1(act(grouped_conv_kxk(act(conv1x1_expand(x)))))

with the middle channels ``expansion`` times wider and the k x k convolution grouped
(``cardinality`` groups, ResNeXt's aggregated transforms). There is no normalisation layer of any
kind: the block stays well-behaved through fix-up initialisation (Zhang et al. 2019, "Fixup
Initialization"; R3GAN sec. 3.2): the last convolution of every residual branch starts at zero,
and the other two are He-initialised with their gain scaled by ``L ** (-1 / (2 m - 2))``, L the
number of residual blocks of the network and m = 3 the convolutions per branch (so L^-1/4), so
the network's output variance does not grow with depth. Activations are leaky ReLU (0.2) after
a learned bias; convolutions have no bias. Resampling is bilinear (the [1, 2, 1] filter,
convolved with [1, 1] into [1, 3, 3, 1], as the official code's interpolative resamplers), the
change of width a 1x1 convolution next to it. G starts from a learned 4x4 basis modulated by a
linear map of z and ends with a 1x1 convolution to the image channels (no tanh); D starts with a
1x1 convolution from the image and ends with a depthwise 4x4 convolution and a linear layer to
the logit. Class-conditional (``architecture.conditional``): G joins a linear embedding of the
one-hot class to z, D's last linear layer gives a vector that is dotted with a linear embedding
of the class (a projection discriminator without the unconditional term). The layer choices,
initialisations and state layout follow the official code (github.com/brownvc/R3GAN,
``R3GAN/Networks.py``); tests/test_r3gan_parity.py checks outputs and gradients against it.

Initialisation: the networks initialise themselves when built (``owns_init``). Until the recipe's
initializer can be told to leave an architecture's layers alone, the architecture accepts only
``[init] name = "none"`` (any other initializer would overwrite the fix-up init, the zero
residual ends first).
"""

from __future__ import annotations

import math

import attrs
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as torch_module  # the global forward hooks

from gan_kit import Architecture, hookimpl, option
from gan_kit.builtin.architectures.conditioning import check_labels

__all__ = ["R3GAN", "Generator", "Discriminator", "ResidualBlock", "Upsample", "Downsample", "msr_init",
           "ACT_GAIN", "BiasedActivation", "GenerativeBasis", "DiscriminativeBasis", "ClassEmbedding"]

#: Gain of leaky ReLU with slope 0.2 (He et al. 2015): sqrt(2 / (1 + 0.2^2)).
ACT_GAIN = math.sqrt(2.0 / (1.0 + 0.2 ** 2))

#: The bilinear resampling filter ([1, 2, 1] convolved with [1, 1]), outer product, sum 1.
_K1 = torch.tensor([1.0, 3.0, 3.0, 1.0])
_KERNEL = torch.outer(_K1, _K1) / 64.0


@torch.no_grad()
def msr_init(layer: nn.Module, gain: float = 1.0) -> nn.Module:
    """He / MSR initialisation: weights N(0, (gain / sqrt(fan_in))^2), bias zero; ``gain`` 0 gives
    zero weights (the fix-up init of a residual branch's last layer). Returns ``layer``."""
    fan_in = layer.weight[0].numel()
    layer.weight.normal_(0.0, gain / math.sqrt(fan_in))
    if getattr(layer, "bias", None) is not None:
        layer.bias.zero_()
    return layer


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` whose weight (and bias) are used in the input's dtype, as the official
    ``Convolution`` (``weight.to(x.dtype)``): a bfloat16 stage (``bf16_resolutions``) runs its
    float32 weights in bfloat16; for a float32 input it is ``nn.Conv2d``."""

    def forward(self, x):
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.conv2d(x, self.weight.to(x.dtype), bias, self.stride, self.padding, self.dilation, self.groups)


def _conv(cin: int, cout: int, k: int = 1, groups: int = 1, gain: float = 1.0) -> Conv2d:
    return msr_init(Conv2d(cin, cout, k, padding=(k - 1) // 2, groups=groups, bias=False), gain)


class BiasedActivation(nn.Module):
    """``leaky_relu(x + b, 0.2)`` with a learned per-channel bias ``b`` (zero at init)."""

    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        return F.leaky_relu(x + self.bias.to(x.dtype).view(1, -1, 1, 1), 0.2)


def _plain(*modules: nn.Module) -> bool:
    """Whether a block may bypass its layers' ``forward`` (see ``ResidualBlock.forward``): plain
    torch layers that no forward hook, their own or global, would miss."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return False
    return all(type(m).forward in (Conv2d.forward, BiasedActivation.forward)
               and not (m._forward_hooks or m._forward_pre_hooks) for m in modules)


def _conv_act(conv: nn.Conv2d, act: BiasedActivation, x: torch.Tensor) -> torch.Tensor:
    """``act(conv(x))`` with the activation's bias added by the convolution (``conv`` has none, so
    ``conv(x) + b`` is ``F.conv2d(x, w, b)``) and the leaky ReLU in place on the fresh output: a
    convolution saves its input and weight for the backward, not its output, and the in-place
    leaky ReLU saves its result, whose sign is its input's (slope 0.2 > 0), so first and second
    derivatives are unchanged. One pass over the tensor instead of three."""
    y = F.conv2d(x, conv.weight.to(x.dtype), act.bias.to(x.dtype), padding=conv.padding, groups=conv.groups)
    return F.leaky_relu_(y, 0.2)


class ResidualBlock(nn.Module):
    """``x + conv3(act(conv2(act(conv1(x)))))``: 1x1 expansion to ``channels * expansion``, a
    grouped ``kernel`` x ``kernel`` convolution with ``cardinality`` groups, a 1x1 projection back
    (zero-initialised). ``num_blocks``: L, the residual blocks of the whole network, for the
    fix-up gain ``ACT_GAIN * L ** -1/4`` of the first two convolutions (the official
    ``VarianceScalingParameter``). ``[N, C, H, W] -> [N, C, H, W]``."""

    def __init__(self, channels: int, cardinality: int, expansion: int, kernel: int, num_blocks: int):
        super().__init__()
        mid = channels * expansion
        gain = ACT_GAIN * num_blocks ** (-1.0 / (2 * 3 - 2))
        self.conv1 = _conv(channels, mid, 1, gain=gain)
        self.act1 = BiasedActivation(mid)
        self.conv2 = _conv(mid, mid, kernel, groups=cardinality, gain=gain)
        self.act2 = BiasedActivation(mid)
        self.conv3 = _conv(mid, channels, 1, gain=0.0)

    #: Whether ``forward`` may fuse each bias into its convolution (see ``_conv_act``). A bfloat16
    #: stage turns it off: the fused bias is added before the one rounding to bfloat16, where the
    #: official code rounds the convolution's output and then the sum, which moves a 32 px G's
    #: pixels by up to 0.02 (the official bf16 against float32: 0.015); unfused, they are equal.
    fused = True

    def forward(self, x):
        layers = (self.conv1, self.act1, self.conv2, self.act2, self.conv3)
        if not (self.fused and _plain(*layers)):  # a hooked layer (feature extraction, FreezeD probes) runs as written
            return x + self.conv3(self.act2(self.conv2(self.act1(self.conv1(x)))))
        y = _conv_act(self.conv2, self.act2, _conv_act(self.conv1, self.act1, x))
        # conv3's output is fresh and no backward needs it: add the skip in place.
        return F.conv2d(y, self.conv3.weight.to(y.dtype)).add_(x)


def _filter_for(channels: int) -> torch.Tensor:
    """The [1, 3, 3, 1] x [1, 3, 3, 1] / 64 filter once per channel, ``[C, 1, 4, 4]``, for a
    depthwise (``groups = C``) convolution."""
    return _KERNEL.expand(channels, 1, 4, 4).contiguous()


class Upsample(nn.Module):
    """1x1 convolution to ``cout`` (when it differs), then 2x bilinear upsampling: each channel
    zero-stuffed and filtered with 4 x the [1, 3, 3, 1] filter, i.e. a stride-2 transposed
    convolution with padding 1 (``[N,C,H,W] -> [N,C,2H,2W]``; the official code's
    ``InterpolativeUpsampler``, equal to its ``upfirdn2d.upsample2d``).

    Computed as one depthwise convolution over ``[N, C, H, W]`` (``groups = C``) rather than a
    one-channel convolution over ``[N * C, 1, H, W]`` as the official reference does: the same
    sums, 10-15x faster forward and backward on the CPU (docs/performance.md, "R3GAN")."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = _conv(cin, cout) if cin != cout else None
        self.register_buffer("kernel", _filter_for(cout) * 4.0, persistent=False)

    def forward(self, x):
        if self.conv is not None:
            x = self.conv(x)
        return F.conv_transpose2d(x, self.kernel.to(x.dtype), stride=2, padding=1, groups=x.shape[1])


class Downsample(nn.Module):
    """2x bilinear downsampling (each channel filtered with the [1, 3, 3, 1] filter, stride 2,
    padding 1: ``[N,C,H,W] -> [N,C,H/2,W/2]``; the official ``InterpolativeDownsampler``), then a
    1x1 convolution to ``cout`` (when it differs). One depthwise convolution, as ``Upsample``."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = _conv(cin, cout) if cin != cout else None
        self.register_buffer("kernel", _filter_for(cin), persistent=False)

    def forward(self, x):
        x = F.conv2d(x, self.kernel.to(x.dtype), stride=2, padding=1, groups=x.shape[1])
        return self.conv(x) if self.conv is not None else x


class GenerativeBasis(nn.Module):
    """``z[N, latent] -> [N, C, 4, 4]``: a learned 4x4 basis per channel (N(0, 1) at init) times a
    linear map of z."""

    def __init__(self, latent_dim: int, channels: int):
        super().__init__()
        self.basis = nn.Parameter(torch.randn(channels, 4, 4))
        self.linear = msr_init(nn.Linear(latent_dim, channels, bias=False))

    def forward(self, z):
        return self.basis.unsqueeze(0) * self.linear(z).unsqueeze(-1).unsqueeze(-1)


class DiscriminativeBasis(nn.Module):
    """``[N, C, 4, 4] -> [N, out]``: a depthwise 4x4 convolution, then a linear layer (``out`` = 1:
    the logit; a conditional D's class-projection vector otherwise)."""

    def __init__(self, channels: int, out: int = 1):
        super().__init__()
        self.basis = msr_init(nn.Conv2d(channels, channels, 4, groups=channels, bias=False))
        self.linear = msr_init(nn.Linear(channels, out, bias=False))

    def forward(self, x):
        return self.linear(self.basis(x).flatten(1))


class ClassEmbedding(nn.Module):
    """``labels[N] (int64) -> [N, dim]``: a linear map without bias of the one-hot class, weight
    ``[dim, num_classes]`` MSR-initialised with ``gain`` (the official ``EmbeddingLayer``). Computed
    as a lookup of the weight's columns: the same numbers as multiplying the one-hot vector."""

    def __init__(self, num_classes: int, dim: int, gain: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, num_classes))
        # The draws the official nn.Linear makes before its MSR init (overwritten), so one seed
        # gives the official initial weights.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        msr_init(self, gain)

    def forward(self, labels):
        return F.embedding(labels, self.weight.t())


class Stage(nn.Sequential):
    """A stage's layers run in turn; with ``dtype`` set, its input is first cast to ``dtype`` (the
    official ``GeneratorStage`` / ``DiscriminatorStage``'s ``DataType``): in a bfloat16 stage every
    layer then computes in bfloat16, its float32 weights cast on use."""

    def __init__(self, *layers: nn.Module, dtype: torch.dtype | None = None):
        super().__init__(*layers)
        self.dtype = dtype
        if dtype == torch.bfloat16:
            for layer in layers:
                if isinstance(layer, ResidualBlock):
                    layer.fused = False  # round as the official code (ResidualBlock.fused)

    def forward(self, x):
        return super().forward(x if self.dtype is None else x.to(self.dtype))


def _stage_dtypes(bf16: list[bool]) -> list[torch.dtype | None]:
    """Each stage's dtype: None (the input's) when no stage is bfloat16; otherwise bfloat16 or
    float32 (a float32 stage after a bfloat16 one casts back, as the official code)."""
    if not any(bf16):
        return [None] * len(bf16)
    return [torch.bfloat16 if b else torch.float32 for b in bf16]


def stage_resolutions(resolution: int) -> list[int]:
    """4, 8, ..., ``resolution``: one stage each."""
    return [4 * 2 ** i for i in range(int(math.log2(resolution)) - 1)]


class Generator(nn.Module):
    """G: ``z[N, latent_dim] -> images[N, channels, r, r]`` (unbounded, about [-1, 1] once trained);
    ``G(z, labels[N])`` when ``num_classes`` > 0 (z joined with a ``class_dim`` embedding of the
    class).

    ``widths[i]``, ``cardinalities[i]``, ``blocks[i]``: channels, groups and residual blocks of stage
    i (4 px first); each stage is its transition (the basis, or an ``Upsample``) then its blocks.
    ``bf16[i]``: stage i computes in bfloat16 (the official FP16Stages; not the 4 px stage, whose
    basis the official code runs in float32); the image is then made in the last stage's dtype and
    returned as float32 (the same values)."""

    def __init__(self, resolution: int, channels: int, latent_dim: int, widths: list[int], cardinalities: list[int],
                 blocks: list[int], expansion: int, kernel: int, num_classes: int = 0, class_dim: int = 0,
                 bf16: list[bool] | None = None):
        super().__init__()
        dtypes = _stage_dtypes(bf16 or [False] * len(widths))
        num_blocks = sum(blocks)
        self.num_classes = num_classes
        # Layers drawn in the official Generator's order (stages, the output convolution, then the
        # class embedding), so one seed gives the official initial weights draw for draw;
        # registered in gankit's order (the embedding first), which checkpoints keep.
        stages = []
        for i, width in enumerate(widths):
            first = (GenerativeBasis(latent_dim + (class_dim if num_classes else 0), width) if i == 0
                     else Upsample(widths[i - 1], width))
            stages.append(Stage(first, *(ResidualBlock(width, cardinalities[i], expansion, kernel, num_blocks)
                                         for _ in range(blocks[i])), dtype=dtypes[i]))
        to_rgb = _conv(widths[-1], channels)
        self.embed = ClassEmbedding(num_classes, class_dim) if num_classes else None
        self.stages = nn.ModuleList(stages)
        self.to_rgb = to_rgb
        self.resolution = resolution

    def forward(self, z, labels=None):
        check_labels(self, self.num_classes, labels, z.shape[0])
        x = z if self.embed is None else torch.cat([z, self.embed(labels).to(z.dtype)], dim=1)
        for stage in self.stages:
            x = stage(x)
        img = self.to_rgb(x)
        return img if self.stages[-1].dtype is None else img.float()


class Discriminator(nn.Module):
    """D: ``images[N, channels, r, r] -> logits[N]``, or ``D(images, labels[N])`` when
    ``num_classes`` > 0; ``widths`` etc. as G's (4 px first), walked from the top. ``blocks``:
    its stages from the input side (FreezeD freezes the first of these); stage 0 holds the 1x1
    convolution from the image. Every layer is per sample. A conditional D's last linear layer
    gives ``class_dim`` features, dotted with the class's embedding (initialised with gain
    ``1 / sqrt(class_dim)``, so the logit starts at the scale of an unconditional one).
    ``bf16``: as G's, 4 px first (stage 0's cast comes before the convolution from the image, as
    the official code's)."""

    def __init__(self, resolution: int, channels: int, widths: list[int], cardinalities: list[int], blocks: list[int],
                 expansion: int, kernel: int, num_classes: int = 0, class_dim: int = 0,
                 bf16: list[bool] | None = None):
        super().__init__()
        top, cards, nblocks = list(reversed(widths)), list(reversed(cardinalities)), list(reversed(blocks))
        dtypes = list(reversed(_stage_dtypes(bf16 or [False] * len(widths))))
        num_blocks = sum(nblocks)
        self.num_classes = num_classes
        stages: list[list[nn.Module]] = []
        for i, width in enumerate(top):
            # Drawn in the official order (a stage's transition before its blocks, the
            # convolution from the image after every stage): one seed, the official initial
            # weights; placed in the order the image flows through them.
            transition = (Downsample(width, top[i + 1]) if i + 1 < len(top)
                          else DiscriminativeBasis(width, class_dim if num_classes else 1))
            layers: list[nn.Module] = [ResidualBlock(width, cards[i], expansion, kernel, num_blocks)
                                       for _ in range(nblocks[i])]
            stages.append([*layers, transition])
        stages[0].insert(0, _conv(channels, top[0]))
        self.blocks = nn.ModuleList(Stage(*layers, dtype=dtypes[i]) for i, layers in enumerate(stages))
        self.embed = ClassEmbedding(num_classes, class_dim, gain=1.0 / math.sqrt(class_dim)) if num_classes else None
        self.resolution = resolution

    def input_blocks(self) -> list[nn.Module]:
        """The stages from the input side (stage 0 holds the 1x1 convolution from the image)."""
        return list(self.blocks)

    def forward(self, img, labels=None, splits: int = 1):
        check_labels(self, self.num_classes, labels, img.shape[0])
        x = img
        for stage in self.blocks:
            x = stage(x)
        if self.embed is None:
            return x.squeeze(1)
        return (x * self.embed(labels).to(x.dtype)).sum(dim=1)


def _per_stage(table: dict[int, int], default: int, stages: list[int]) -> list[int]:
    return [int(table.get(r, default)) for r in stages]


class R3GAN(Architecture):
    """R3GAN (Huang et al. 2024): ConvNeXt-style residual G and D, grouped convs, inverted bottleneck, no normalisation, fix-up init, bilinear resampling; static resolution."""

    @attrs.frozen
    class Options:
        latent_dim: int = option(64, help="Size of the latent z (R3GAN's CIFAR-10 config: 64).", min=1, max=4096)
        width: int = option(96, help="Channels of every stage (R3GAN's CIFAR-10 config: 768 at 32 px; "
                                     "width_by_resolution overrides it per stage).", min=1, max=4096)
        width_by_resolution: dict[int, int] = option(
            factory=dict, help="Channels per stage keyed by its resolution in px, e.g. {4 = 128, 8 = 96, 16 = 64} "
                               "(FFHQ-256 narrows the high-resolution stages); a stage not named takes width.",
            min=1, max=4096)
        cardinality: int = option(4, help="Groups of each block's k x k convolution (ResNeXt cardinality; CIFAR-10: "
                                          "96 groups of 16 channels). Must divide width x expansion.", min=1,
                                  max=4096)
        cardinality_by_resolution: dict[int, int] = option(
            factory=dict, help="Groups per stage keyed by its resolution in px (the official CardinalityPerStage; "
                               "FFHQ-256 halves them with the width, keeping 16 channels a group); a stage not "
                               "named takes cardinality.", min=1, max=4096)
        blocks_per_stage: int = option(2, help="Residual blocks per stage (CIFAR-10: 2).", min=1, max=64)
        blocks_by_resolution: dict[int, int] = option(
            factory=dict, help="Residual blocks per stage keyed by its resolution in px (the official "
                               "BlocksPerStage); a stage not named takes blocks_per_stage.", min=1, max=64)
        expansion: int = option(2, help="Inverted-bottleneck expansion of each block's middle (R3GAN: 2).",
                                min=1, max=16)
        kernel_size: int = option(3, help="Side of the grouped convolution (R3GAN: 3); odd.", min=1, max=9,
                                  validator=lambda v: None if v % 2 else f"must be odd, got {v}")
        g_class_dim: int | None = option(
            None, help="Class-conditional G: size of the class embedding joined to z; None = latent_dim (the "
                       "official CIFAR-10 and ImageNet configs).", min=1, max=4096)
        d_class_dim: int | None = option(
            None, help="Class-conditional D: size of the class-projection vector; None = the 4 px stage's width "
                       "(the official configs).", min=1, max=4096)
        bf16_resolutions: tuple[int, ...] = option(
            (), help="Stages of G and D (by resolution in px) computed in bfloat16, as the official FP16Stages "
                     "(its CIFAR-10 and ImageNet-32 presets: 8, 16, 32; FFHQ-64 and ImageNet-64: 8 to 64; "
                     "FFHQ-256: 32 to 256): such a stage casts its input to bfloat16 and uses its float32 weights "
                     "in bfloat16, on any device, so an imported official network gives the official pixels; G's "
                     "image comes back as float32. Not 4 (the official basis layers are float32). Empty: every "
                     "stage in the input's dtype.", min=8, max=65536)

    #: The networks set their own initialisation (fix-up: zero residual ends, L^-1/4 gains).
    owns_init = True
    supports_spectral_norm = False
    supports_conditional = True
    spectral_norm_reason = ("its fix-up initialisation starts every residual branch's last convolution at zero, "
                            "whose largest singular value is 0, and the paper's point is a network without "
                            "normalisation")
    joint_d_forward = True  # every layer is per sample: D(cat([real, fake])) is two forwards' logits

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def widths(self, resolution: int) -> list[int]:
        """Channels of each stage, 4 px first."""
        o = self.options
        return _per_stage(o.width_by_resolution, o.width, stage_resolutions(resolution))

    def cardinalities(self, resolution: int) -> list[int]:
        """Groups of each stage's k x k convolutions, 4 px first."""
        o = self.options
        return _per_stage(o.cardinality_by_resolution, o.cardinality, stage_resolutions(resolution))

    def stage_bf16(self, resolution: int) -> list[bool]:
        """Whether each stage computes in bfloat16, 4 px first."""
        return [r in self.options.bf16_resolutions for r in stage_resolutions(resolution)]

    def stage_blocks(self, resolution: int) -> list[int]:
        """Residual blocks of each stage, 4 px first."""
        o = self.options
        return _per_stage(o.blocks_by_resolution, o.blocks_per_stage, stage_resolutions(resolution))

    @classmethod
    def problems(cls, o, recipe):
        if recipe.growth.name != "static":
            yield "growth.name", f"r3gan does not grow: use [growth] name = \"static\", not {recipe.growth.name!r}"
        if recipe.init.name != "none":
            yield "init.name", (f"r3gan initialises its own layers (fix-up init: zero residual ends, L^-1/4 gains), "
                                f"which the initializer {recipe.init.name!r} would overwrite; set [init] "
                                f"name = \"none\"")
        res = recipe.resolution
        stages = stage_resolutions(res)
        for key in ("width_by_resolution", "cardinality_by_resolution", "blocks_by_resolution"):
            extra = sorted(set(getattr(o, key)) - set(stages))
            if extra:
                yield key, (f"names resolutions {extra} that are no stage at data.resolution = {res} "
                            f"(stages: {stages})")
        extra = sorted(set(o.bf16_resolutions) - set(stages[1:]))
        if extra:
            yield "bf16_resolutions", (f"names {extra}, which are no stage above 4 px at data.resolution = {res} "
                                       f"(choose from {stages[1:]}; the 4 px stage stays float32)")
        for r in stages:
            w = int(o.width_by_resolution.get(r, o.width))
            groups = int(o.cardinality_by_resolution.get(r, o.cardinality))
            if w < 1 or groups < 1:
                break  # the option's own range check says it
            if (w * o.expansion) % groups:
                key = "cardinality_by_resolution" if r in o.cardinality_by_resolution else "cardinality"
                yield key, (f"{groups} groups do not divide the {w * o.expansion} middle channels "
                            f"of the {r} px stage (width {w} x expansion {o.expansion}); choose a divisor")
                break

    def build(self, resolution, channels):
        o = self.options
        widths, cards, blocks = self.widths(resolution), self.cardinalities(resolution), self.stage_blocks(resolution)
        k, bf16 = self.context.num_classes, self.stage_bf16(resolution)
        G = Generator(resolution, channels, o.latent_dim, widths, cards, blocks, o.expansion, o.kernel_size,
                      num_classes=k, class_dim=o.g_class_dim or o.latent_dim, bf16=bf16)
        D = Discriminator(resolution, channels, widths, cards, blocks, o.expansion, o.kernel_size,
                          num_classes=k, class_dim=o.d_class_dim or widths[0], bf16=bf16)
        return G, D


@hookimpl
def register_architectures(register):
    register("r3gan", R3GAN)
