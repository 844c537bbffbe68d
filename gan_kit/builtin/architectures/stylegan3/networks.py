"""StyleGAN3 networks and the ``stylegan3`` architecture component (Karras et al. 2021,
"Alias-Free Generative Adversarial Networks", arXiv:2106.12423): G = StyleGAN2's mapping network
(2 layers in the paper's configs) + the alias-free synthesis network (sec. 3, fig. 4c: Fourier
feature input, ``num_layers`` layers with filtered leaky ReLUs following the cutoff schedule,
ToRGB, output times ``output_scale``); D = StyleGAN2's residual D (the paper's D)."""

from __future__ import annotations

import copy
import math
import weakref
from typing import Literal

import attrs
import torch
from torch import nn

from gan_kit import Architecture, mean_over_processes, option
from gan_kit.builtin.architectures.conditioning import check_labels
from gan_kit.builtin.architectures.stylegan2 import Discriminator, MappingNetwork
from gan_kit.builtin.architectures.stylegan2 import Generator as StyleGAN2Generator
from gan_kit.builtin.architectures.stylegan3.schedule import layer_schedule, num_ws
from gan_kit.builtin.architectures.stylegan3.synthesis_input import SynthesisInput, user_transform
from gan_kit.builtin.architectures.stylegan3.synthesis_layer import ModConv, SynthesisLayer

__all__ = ["SynthesisNetwork", "Generator", "StyleGAN3", "Config"]

#: "t": translation equivariant (3x3 convs, separable filters); "r": rotation equivariant too
#: (1x1 convs, radial downsampling filters, doubled feature maps; sec. 3.2 / the paper's code's
#: ``--cfg stylegan3-r``).
Config = Literal["t", "r"]


class SynthesisNetwork(nn.Module):
    """``ws[N, num_layers + 2, w_dim] -> images[N, channels, r, r]``: ``input`` takes ``ws[:, 0]``,
    layer i ``ws[:, i + 1]`` (the last is ToRGB), the output times ``output_scale`` (0.25). The
    layers follow ``schedule.layer_schedule`` (``schedule_kwargs``: its keywords)."""

    def __init__(self, w_dim: int, resolution: int, channels: int, *, output_scale: float = 0.25,
                 conv_clamp: float | None = 256.0, magnitude_ema_beta: float = 0.999, filter_size: int = 6,
                 modconv: ModConv = "grouped", **schedule_kwargs):
        super().__init__()
        inp, specs = layer_schedule(resolution, channels, filter_size=filter_size, **schedule_kwargs)
        self.output_scale = float(output_scale)
        self.num_ws = num_ws(len(specs) - 1)
        self.input = SynthesisInput(w_dim, **inp)
        self.layers = nn.ModuleList(SynthesisLayer(s, w_dim, filter_size=filter_size, conv_clamp=conv_clamp,
                                                   magnitude_ema_beta=magnitude_ema_beta, modconv=modconv)
                                    for s in specs)

    def forward(self, ws: torch.Tensor, update_emas: bool = False, transform: torch.Tensor | None = None) -> torch.Tensor:
        x = self.input(ws[:, 0].float(), transform)
        for i, layer in enumerate(self.layers):
            x = layer(x, ws[:, i + 1].float(), update_emas=update_emas)
        return x * self.output_scale if self.output_scale != 1 else x


class Generator(nn.Module):
    """StyleGAN3 G: ``z[N, latent_dim] -> images[N, channels, r, r]``.

    ``mapping(z, labels, truncation_psi) -> ws[N, num_ws, w_dim]`` (the stylegan2 mapping
    network: z normalised, a class-conditional label embedded, normalised and joined, FC layers
    with lr x ``mapping_lr_mult``; every W pulled to ``w_avg`` by ``truncation_psi``, the first
    ``truncation_cutoff`` only when set) and ``synthesis(ws, noise_mode) -> images``
    (``noise_mode`` is accepted and ignored: StyleGAN3 has no noise inputs). ``w_avg`` (buffer)
    and every layer's ``magnitude_ema`` are updated by a training-mode forward (``update_emas``:
    None = ``self.training``). ``style_mixing_prob`` > 0 mixes styles in training as stylegan2's
    G (the paper's configs: 0)."""

    def __init__(self, resolution: int, channels: int, latent_dim: int, w_dim: int, *, mapping_layers: int = 2,
                 mapping_lr_mult: float = 0.01, w_avg_beta: float = 0.998, num_classes: int = 0,
                 truncation_cutoff: int | None = None, style_mixing_prob: float = 0.0, **synthesis_kwargs):
        super().__init__()
        self.latent_dim, self.w_dim, self.resolution = latent_dim, w_dim, resolution
        self.num_classes, self.truncation_cutoff = num_classes, truncation_cutoff
        self.w_avg_beta, self.style_mixing_prob = float(w_avg_beta), float(style_mixing_prob)
        self.synthesis_network = SynthesisNetwork(w_dim, resolution, channels, **synthesis_kwargs)
        self.num_ws = self.synthesis_network.num_ws
        self.mapping_network = MappingNetwork(latent_dim, w_dim, mapping_layers, mapping_lr_mult, num_classes)
        self.register_buffer("w_avg", torch.zeros(w_dim))

    def mapping(self, z: torch.Tensor, labels: torch.Tensor | None = None, truncation_psi: float = 1.0, *,
                update_w_avg: bool = False) -> torch.Tensor:
        """``z[N, latent_dim]`` (``labels[N]`` int64 for a conditional G) ``-> ws[N, num_ws,
        w_dim]``, truncated to ``w_avg + psi (w - w_avg)`` for psi != 1. ValueError when a
        conditional G gets no labels or an unconditional one gets some."""
        check_labels(self, self.num_classes, labels, z.shape[0])
        w = self.mapping_network(z, labels)
        if update_w_avg:
            with torch.no_grad():
                self.w_avg.copy_(mean_over_processes(w.detach().float().mean(dim=0)).lerp(self.w_avg, self.w_avg_beta))
        ws = w.unsqueeze(1).expand(-1, self.num_ws, -1)
        if truncation_psi == 1:
            return ws
        k = self.num_ws if self.truncation_cutoff is None else min(self.truncation_cutoff, self.num_ws)
        truncated = self.w_avg.to(w.dtype).lerp(w, float(truncation_psi)).unsqueeze(1).expand(-1, k, -1)
        return torch.cat([truncated, ws[:, k:]], dim=1)

    def synthesis(self, ws: torch.Tensor, noise_mode: str = "const", *, update_emas: bool = False,
                  transform: torch.Tensor | None = None) -> torch.Tensor:
        """``ws[N, num_ws, w_dim] -> images[N, channels, r, r]``; ValueError for another
        ``num_ws``. ``update_emas``: update every layer's ``magnitude_ema`` from this batch.
        ``transform[3, 3]``: the synthesis input's user transform for this call (None: its
        ``transform`` buffer, which ``StyleGAN3.set_output_transform`` sets)."""
        if ws.ndim != 3 or ws.shape[1] != self.num_ws:
            raise ValueError(f"synthesis: expected ws[N, {self.num_ws}, {self.w_dim}], got {tuple(ws.shape)}")
        return self.synthesis_network(ws, update_emas=update_emas, transform=transform)

    # Style mixing (StyleGAN sec. 3.1) exactly as stylegan2's G: it reads only mapping, latent_dim,
    # num_ws and style_mixing_prob, which this G has under the same names.
    mix_styles = StyleGAN2Generator.mix_styles

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None, *, truncation_psi: float = 1.0,
                noise_mode: str = "const", update_emas: bool | None = None,
                transform: torch.Tensor | None = None) -> torch.Tensor:
        """Images ``[N, channels, r, r]`` for ``z``; ``update_emas`` (None: in training mode)
        updates ``w_avg`` and the magnitude EMAs; style mixing in training mode; ``transform``:
        see ``synthesis``."""
        update = self.training if update_emas is None else update_emas
        ws = self.mapping(z, labels, truncation_psi, update_w_avg=update)
        if self.training and self.style_mixing_prob > 0:
            ws = self.mix_styles(ws, labels)
        return self.synthesis(ws, noise_mode, update_emas=update, transform=transform)


# -------------------------------------------------------------------------------- architecture --


def _positive(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


class StyleGAN3(Architecture):
    """StyleGAN3 (Karras et al. 2021): alias-free G (Fourier-feature input, filtered leaky ReLUs, configs T and R) with StyleGAN2's mapping network and residual D; static resolution; class-conditional."""

    @attrs.frozen
    class Options:
        config: Config = option("t", help='"t" (StyleGAN3-T: translation equivariance, 3x3 convs, separable '
                                          'Kaiser filters) or "r" (StyleGAN3-R: also rotation, 1x1 convs, radial '
                                          'downsampling filters, channel_base and channel_max doubled).')
        latent_dim: int = option(64, help="Size of the latent z (paper: 512).", validator=_positive)
        w_dim: int = option(64, help="Size of the intermediate latent W (paper: 512).", validator=_positive)
        mapping_layers: int = option(2, help="FC layers of the mapping network z -> W (StyleGAN3: 2).",
                                     validator=_positive)
        mapping_lr_mult: float = option(0.01, help="Learning-rate multiplier of the mapping network.", min=0,
                                        min_exclusive=True)
        w_avg_beta: float = option(0.998, help="Decay of the running average of W, per training forward.", min=0,
                                   max=1)
        channel_base: int = option(4096, help="Feature maps of a layer with cutoff f_c: min(channel_base / 2 / f_c, "
                                              "channel_max) (paper: 32768; doubled for \"r\").", validator=_positive)
        channel_max: int = option(64, help="Largest number of feature maps (paper: 512; doubled for \"r\").",
                                  validator=_positive)
        num_layers: int = option(14, help="Synthesis layers, without the input and ToRGB (paper: 14).", min=3)
        num_critical: int = option(2, help="Critically sampled layers at the end (paper: 2).", min=0)
        margin_size: int = option(10, help="Pixels computed outside the image on each side (paper: 10).", min=0)
        conv_clamp: float | None = option(256.0, help="Clamp every synthesis layer's output to [-conv_clamp, "
                                                      "+conv_clamp] (paper's code: 256; none = no clamp).",
                                          min=0, min_exclusive=True)
        magnitude_ema_beta: float = option(0.999, help="Decay of each layer's running input magnitude per training "
                                                       "forward (paper's train.py: 0.5 ** (batch / 20000)).",
                                           min=0, max=1)
        style_mixing_prob: float = option(0.0, help="Probability of style mixing per training batch (the paper's "
                                                    "StyleGAN3 configs: 0, off; StyleGAN2's: 0.9).", min=0, max=1)
        truncation_cutoff: int | None = option(None, help="Truncation on the first truncation_cutoff Ws only; "
                                                          "None = all.", min=0)
        mbstd_group_size: int = option(4, help="D's minibatch-stddev group size (0 disables the layer).", min=0)
        modconv: ModConv = option("grouped", help='Modulated convolution (same formula): "grouped" (one '
                                                  'convolution with groups=N, the paper\'s code\'s) or "scaled" '
                                                  '(the input scaled by the styles around one shared-weight '
                                                  'convolution, the output by the demodulation; exports use it).')
        d_blur_sigma: float = option(0.0, help="Blur every image D sees (reals and fakes) by a Gaussian of this many "
                                               "pixels, 2 ** -(x / sigma) ** 2 on floor(3 sigma) taps each side "
                                               "(StyleGAN3-R: a linear schedule from 10 to 0 over the first "
                                               "batch * 200 / 32 kimg; 0 = none, the T config's).",
                                     min=0, max=1000, schedulable=True)

    supports_truncation = True
    supports_conditional = True
    supports_spectral_norm = False

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        # The Ds built, for a scheduled d_blur_sigma; weak, so a D its run (or an importer)
        # dropped is not kept alive here.
        self._discriminators: weakref.WeakSet = weakref.WeakSet()

    @classmethod
    def problems(cls, o, recipe):
        if recipe.growth.name != "static":
            yield "growth.name", f"stylegan3 does not grow: use [growth] name = \"static\", not {recipe.growth.name!r}"
        init = recipe.init
        if init.name != "equalized-lr" or abs(float(getattr(init.options, "gain", math.sqrt(2.0))) - math.sqrt(2.0)) > 1e-12:
            yield "init.name", (f"stylegan3's layers apply the equalized learning rate themselves, so the initializer "
                                f"{init.name!r} would not change them (set [init] name = \"equalized-lr\" with its "
                                f"default gain, or remove the [init] table)")
        if o.num_layers <= o.num_critical:
            yield "num_layers", (f"{o.num_layers} must exceed num_critical ({o.num_critical}): the cutoff schedule "
                                 f"needs a non-critical layer")

    @property
    def latent_dim(self) -> int:
        return self.options.latent_dim

    def synthesis_kwargs(self) -> dict:
        """The synthesis network's keywords for the options (``"r"``: 1x1 convs, radial filters,
        channel_base and channel_max doubled, as the paper's code's ``--cfg stylegan3-r``)."""
        o = self.options
        r = o.config == "r"
        return dict(channel_base=o.channel_base * (2 if r else 1), channel_max=o.channel_max * (2 if r else 1),
                    num_layers=o.num_layers, num_critical=o.num_critical, margin_size=o.margin_size,
                    conv_kernel=1 if r else 3, use_radial_filters=r, conv_clamp=o.conv_clamp,
                    magnitude_ema_beta=o.magnitude_ema_beta, modconv=o.modconv)

    def set_output_transform(self, G: nn.Module, translate: tuple[float, float] = (0.0, 0.0),
                             rotate: float = 0.0) -> None:
        """From now on, G draws its images translated by ``translate`` (x, y, in image widths)
        and rotated by ``rotate`` degrees: the synthesis input's ``transform`` buffer set to
        ``user_transform(translate, rotate)`` (the inverse matrix, as the paper's gen_images.py
        sets it). (0, 0), 0 restores the identity."""
        G.synthesis_network.input.transform.copy_(user_transform(translate, rotate))

    def set_option(self, name: str, value) -> None:
        """A schedule's new value of option ``name`` (before every iteration); ``d_blur_sigma``
        reaches every D this component built."""
        self.options = attrs.evolve(self.options, **{name: value})
        if name == "d_blur_sigma":
            for D in self._discriminators:
                D.set_blur_sigma(value)

    def export_view(self, G: nn.Module) -> nn.Module:
        # The "scaled" modulated convolution: the same function without a convolution whose
        # groups are the batch size, so ONNX and TorchScript graphs keep the batch free.
        view = copy.deepcopy(G)
        for layer in view.synthesis_network.layers:
            layer.modconv = "scaled"
        return view

    def build(self, resolution, channels):
        o = self.options
        k = self.context.num_classes
        G = Generator(resolution, channels, o.latent_dim, o.w_dim, mapping_layers=o.mapping_layers,
                      mapping_lr_mult=o.mapping_lr_mult, w_avg_beta=o.w_avg_beta, num_classes=k,
                      truncation_cutoff=o.truncation_cutoff, style_mixing_prob=o.style_mixing_prob,
                      **self.synthesis_kwargs())
        base, top = o.channel_base, o.channel_max
        D = Discriminator(resolution, channels, lambda res: int(min(base // res, top)), o.mbstd_group_size,
                          num_classes=k, conv_clamp=o.conv_clamp)
        D.set_blur_sigma(o.d_blur_sigma)
        self._discriminators.add(D)
        return G, D


