"""Official StyleGAN2 snapshots -> gankit's ``stylegan2`` architecture: the recipe options of a G
(and D) from their constructor arguments, and their state dicts under gankit's names.

The official networks are stylegan2-ada-pytorch's ``training/networks.py`` (Karras et al. 2020b,
arXiv:2006.06676) and the StyleGAN3 repository's ``training/networks_stylegan2.py`` (Karras et
al. 2021), the same networks with a few other defaults; both keep each network's constructor
arguments (``init_kwargs``) in their snapshots. gankit's ``stylegan2`` computes the same float32
function for every configuration these functions accept; they refuse the rest with a
GankitError naming the argument.

Stored-parameter conventions are the same in both code bases, so every tensor is copied as is:
an FC layer stores its weight as ``N(0, 1) / lr_mult`` and uses ``weight * lr_mult /
sqrt(fan_in)``, and uses its stored bias times ``lr_mult``; a convolution uses ``weight /
sqrt(Cin * k * k)``; ToRGB's weight gain, applied to the styles officially and to the weight in
gankit, multiplies the same product.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

import attrs
import torch

from gan_kit import BuildContext, GankitError
from gan_kit.builtin.architectures.stylegan2 import StyleGAN2

__all__ = ["stylegan2_options", "stylegan2_state_dict", "Source"]

Source = Literal["stylegan2-ada-pytorch", "stylegan3"]

#: Defaults where the two official files differ (an argument a snapshot does not record takes
#: its file's default): SynthesisBlock's and Discriminator's conv_clamp, SynthesisNetwork's and
#: Discriminator's num_fp16_res, MappingNetwork's w_avg_beta.
_SOURCE_DEFAULTS = {
    "stylegan2-ada-pytorch": {"conv_clamp": None, "num_fp16_res": 0, "w_avg_beta": 0.995},
    "stylegan3": {"conv_clamp": 256, "num_fp16_res": 4, "w_avg_beta": 0.998},
}

_SYNTHESIS_KEYS = {"channel_base", "channel_max", "num_fp16_res", "architecture", "resample_filter", "conv_clamp",
                   "fp16_channels_last", "fused_modconv_default", "kernel_size", "use_noise", "activation"}

_FILTER = (1, 3, 3, 1)


def _refuse(path: str, value: Any, fix: str) -> GankitError:
    return GankitError(f"{path} = {value!r}: {fix}")


def _unknown(path: str, value: Any) -> GankitError:
    return _refuse(path, value, "gankit's stylegan2 importer does not know this argument of the official "
                                "networks, so it cannot promise the same function (remove it, or import by hand)")


class _Args:
    """One official kwargs dict: ``take(key, default)`` reads a value (and marks the key used);
    ``finish()`` refuses the first key nobody took."""

    def __init__(self, path: str, kwargs: dict | None):
        if kwargs is not None and not isinstance(kwargs, dict):
            raise _refuse(path, kwargs, "expected a dict of keyword arguments")
        self.path, self.kwargs, self.used = path, dict(kwargs or {}), set()

    def take(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.kwargs.get(key, default)

    def sub(self, key: str) -> _Args:
        return _Args(f"{self.path}.{key}", self.take(key, {}))

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def finish(self) -> None:
        for key, value in self.kwargs.items():
            if key not in self.used:
                raise _unknown(self.at(key), value)


def _check_equal(args: _Args, key: str, allowed: Any, what: str) -> None:
    """Refuses ``key`` unless it is left out or equals ``allowed`` (the official default)."""
    value = args.take(key, allowed)
    if value != allowed:
        raise _refuse(args.at(key), value, f"gankit's stylegan2 implements {what} only")


def _check_filter(args: _Args) -> None:
    value = args.take("resample_filter", list(_FILTER))
    try:
        taps = torch.as_tensor(value, dtype=torch.float64)
        ok = taps.ndim == 1 and taps.numel() == 4 and torch.allclose(taps / taps.sum(), torch.tensor(_FILTER,
                                                                      dtype=torch.float64) / 8)
    except (TypeError, ValueError, RuntimeError):
        ok = False
    if not ok:
        raise _refuse(args.at("resample_filter"), value, "gankit's stylegan2 resamples with the [1, 3, 3, 1] "
                                                         "filter only")


def _positive_int(args: _Args, key: str, default: Any = None) -> Any:
    value = args.take(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _refuse(args.at(key), value, "expected a positive integer")
    return value


def _number(args: _Args, key: str, default: Any, *, allow_none: bool = False) -> Any:
    value = args.take(key, default)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _refuse(args.at(key), value, "expected a positive finite number" + (" or None" if allow_none else ""))
    return float(value)


def _source_of(G_kwargs: dict, source: Source | None) -> Source:
    if source is not None:
        if source not in _SOURCE_DEFAULTS:
            raise _refuse("source", source, "use 'stylegan2-ada-pytorch' or 'stylegan3'")
        return source
    # stylegan2-ada-pytorch's Generator takes synthesis_kwargs as one dict; the StyleGAN3
    # repository's takes them as keywords of its own (a dict there would reach SynthesisLayer
    # and fail), so either shape names its file.
    if "synthesis_kwargs" in G_kwargs:
        return "stylegan2-ada-pytorch"
    if _SYNTHESIS_KEYS & set(G_kwargs):
        return "stylegan3"
    raise GankitError("G: the snapshot records no synthesis arguments, so it does not show whether it comes from "
                      "stylegan2-ada-pytorch or the StyleGAN3 repository, whose defaults differ (conv_clamp, "
                      "num_fp16_res, w_avg_beta); pass source='stylegan2-ada-pytorch' or 'stylegan3' (the module of "
                      "the pickled class: training.networks or training.networks_stylegan2)")


def _toml_options(values: dict) -> dict:
    """``values`` as a recipe writes them: a None whose option defaults to None is left out, one
    whose default is not None is written ``"none"`` (how a recipe spells None)."""
    defaults = {f.name: f.default for f in attrs.fields(StyleGAN2.Options)}
    out = {}
    for key, value in values.items():
        if value is None:
            if defaults[key] is not None:
                out[key] = "none"
        else:
            out[key] = value
    return out


def stylegan2_options(G_kwargs: dict, D_kwargs: dict | None = None, *, source: Source | None = None) -> dict:
    """The gankit recipe values of an official StyleGAN2 G (and D) from their constructor
    arguments (the snapshot's ``init_kwargs``).

    ``G_kwargs``: the Generator's (z_dim, c_dim, w_dim, img_resolution, img_channels,
    mapping_kwargs, and the synthesis arguments: one ``synthesis_kwargs`` dict in
    stylegan2-ada-pytorch, keywords of their own in the StyleGAN3 repository). ``D_kwargs``: the
    Discriminator's (c_dim, img_resolution, img_channels, architecture, channel_base, channel_max,
    num_fp16_res, conv_clamp, cmap_dim, block_kwargs, mapping_kwargs, epilogue_kwargs), or None
    for a G alone (D's options then stay gankit's defaults). ``source``: which official file made
    them ("stylegan2-ada-pytorch" or "stylegan3"), which decides the defaults of arguments a
    snapshot leaves out; None infers it from the shape of ``G_kwargs``.

    Returns ``{"resolution", "channels", "num_classes", "architecture": {stylegan2 option:
    TOML value}}``. ``num_classes`` is the official ``c_dim``: gankit feeds class indices, the
    official code their one-hot vectors (the only labels its data sets make). Arguments that do
    not change the function (memory formats, ``fused_modconv_default``, D's ``freeze_layers``,
    which is a training setting) are accepted and dropped. Raises GankitError naming the first
    argument (``G.synthesis_kwargs.architecture = 'foo'``) whose value gankit does not implement.
    """
    if not isinstance(G_kwargs, dict):
        raise _refuse("G", G_kwargs, "expected the Generator's init_kwargs (a dict)")
    src = _source_of(G_kwargs, source)
    defaults = _SOURCE_DEFAULTS[src]
    g = _Args("G", G_kwargs)
    resolution = _positive_int(g, "img_resolution", 0)
    if resolution < 4 or resolution & (resolution - 1):
        raise _refuse("G.img_resolution", resolution, "expected a power of two >= 4")
    channels = _positive_int(g, "img_channels", 0)
    num_classes = g.take("c_dim", 0)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise _refuse("G.c_dim", num_classes, "expected an integer >= 0")
    arch: dict[str, Any] = {"latent_dim": _positive_int(g, "z_dim", 0), "w_dim": _positive_int(g, "w_dim", 0)}

    syn = g.sub("synthesis_kwargs") if src == "stylegan2-ada-pytorch" else g
    arch["channel_base"] = _positive_int(syn, "channel_base", 32768)
    arch["channel_max"] = _positive_int(syn, "channel_max", 512)
    fp16 = syn.take("num_fp16_res", defaults["num_fp16_res"])
    if isinstance(fp16, bool) or not isinstance(fp16, int) or fp16 < 0:
        raise _refuse(syn.at("num_fp16_res"), fp16, "expected an integer >= 0")
    arch["num_fp16_res"] = fp16
    # stylegan2-ada-pytorch computes its fp16 blocks in float16 on every device; the StyleGAN3
    # repository's networks_stylegan2 forces float32 off CUDA (SynthesisBlock.forward).
    arch["fp16_devices"] = "all" if src == "stylegan2-ada-pytorch" else "cuda"
    g_arch = syn.take("architecture", "skip")
    if g_arch not in ("skip", "orig", "resnet"):
        raise _refuse(syn.at("architecture"), g_arch, "gankit's stylegan2 implements 'skip', 'orig' or 'resnet'")
    arch["g_architecture"] = g_arch
    _check_filter(syn)
    arch["conv_clamp"] = _number(syn, "conv_clamp", defaults["conv_clamp"], allow_none=True)
    for key in ("fp16_channels_last", "fused_modconv_default"):
        syn.take(key)  # memory format and kernel choice: the same function
    _check_equal(syn, "kernel_size", 3, "3x3 synthesis convolutions")
    _check_equal(syn, "use_noise", True, "synthesis layers with noise inputs")
    _check_equal(syn, "activation", "lrelu", "the leaky ReLU activation ('lrelu')")
    if syn is not g:
        syn.finish()

    m = g.sub("mapping_kwargs")
    arch["mapping_layers"] = _positive_int(m, "num_layers", 8)
    arch["mapping_embed_features"] = _positive_int(m, "embed_features")
    arch["mapping_layer_features"] = _positive_int(m, "layer_features")
    arch["mapping_lr_mult"] = _number(m, "lr_multiplier", 0.01)
    beta = m.take("w_avg_beta", defaults["w_avg_beta"])
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
        raise _refuse(m.at("w_avg_beta"), beta, "gankit's stylegan2 tracks w_avg (for truncation) with a decay "
                                                "in [0, 1]")
    arch["w_avg_beta"] = float(beta)
    _check_equal(m, "activation", "lrelu", "the leaky ReLU activation ('lrelu')")
    m.finish()
    g.finish()
    if num_classes == 0:
        arch["mapping_embed_features"] = None  # not built without labels
    if D_kwargs is not None:
        arch.update(_d_options(D_kwargs, resolution, channels, num_classes, arch, defaults))
    return {"resolution": resolution, "channels": channels, "num_classes": num_classes,
            "architecture": _toml_options(arch)}


def _d_options(D_kwargs: dict, resolution: int, channels: int, num_classes: int, g_arch: dict,
               defaults: dict) -> dict:
    """D's options (see ``stylegan2_options``), checked against G's where gankit shares one."""
    d = _Args("D", D_kwargs)
    for key, value in (("img_resolution", resolution), ("img_channels", channels), ("c_dim", num_classes)):
        got = d.take(key, 0 if key == "c_dim" else None)
        if got != value:
            raise _refuse(d.at(key), got, f"G has {value}; gankit builds G and D for one data set")
    out: dict[str, Any] = {}
    d_arch = d.take("architecture", "resnet")
    if d_arch not in ("resnet", "orig", "skip"):
        raise _refuse(d.at("architecture"), d_arch, "gankit's stylegan2 implements 'resnet', 'orig' or 'skip'")
    out["d_architecture"] = d_arch
    base = _positive_int(d, "channel_base", 32768)
    top = _positive_int(d, "channel_max", 512)
    out["d_channel_base"] = None if base == g_arch["channel_base"] else base
    out["d_channel_max"] = None if top == g_arch["channel_max"] else top
    fp16 = d.take("num_fp16_res", defaults["num_fp16_res"])
    if fp16 != g_arch["num_fp16_res"]:
        raise _refuse(d.at("num_fp16_res"), fp16, f"G has {g_arch['num_fp16_res']}; gankit records one num_fp16_res "
                                                  "for both networks")
    clamp = _number(d, "conv_clamp", defaults["conv_clamp"], allow_none=True)
    if clamp != g_arch["conv_clamp"]:
        raise _refuse(d.at("conv_clamp"), clamp, f"G has {g_arch['conv_clamp']!r}; gankit's stylegan2 has one "
                                                 "conv_clamp for both networks")
    c4 = min(base // 4, top)
    cmap = _positive_int(d, "cmap_dim")
    out["d_cmap_dim"] = None if cmap in (None, c4) or num_classes == 0 else cmap

    b = d.sub("block_kwargs")
    _check_equal(b, "activation", "lrelu", "the leaky ReLU activation ('lrelu')")
    _check_filter(b)
    b.take("fp16_channels_last")  # a memory format: the same function
    b.take("freeze_layers")  # FreezeD, a training setting: the same function
    b.finish()

    m = d.sub("mapping_kwargs")
    layers = m.take("num_layers", 8)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
        raise _refuse(m.at("num_layers"), layers, "expected an integer >= 0")
    lr = _number(m, "lr_multiplier", 0.01)
    if num_classes:  # an unconditional D builds no label mapping: its settings change nothing
        out["d_mapping_layers"] = layers
        out["d_mapping_lr_mult"] = None if lr == g_arch["mapping_lr_mult"] else lr
    cmap_dim = cmap or c4
    for key in ("embed_features", "layer_features"):
        value = m.take(key)
        if value not in (None, cmap_dim):
            raise _refuse(m.at(key), value, f"gankit's D label mapping is {cmap_dim} wide (D's cmap_dim) throughout")
    _check_equal(m, "activation", "lrelu", "the leaky ReLU activation ('lrelu')")
    m.finish()

    e = d.sub("epilogue_kwargs")
    group = e.take("mbstd_group_size", 4)
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise _refuse(e.at("mbstd_group_size"), group, "gankit's stylegan2 needs a group size >= 1 (None, the "
                                                       "whole batch, is not implemented)")
    num = e.take("mbstd_num_channels", 1)
    if isinstance(num, bool) or not isinstance(num, int) or num < 0:
        raise _refuse(e.at("mbstd_num_channels"), num, "expected an integer >= 0")
    out["mbstd_group_size"] = group if num else 0
    out["mbstd_num_channels"] = num or 1
    _check_equal(e, "activation", "lrelu", "the leaky ReLU activation ('lrelu')")
    e.finish()
    d.finish()
    return out


# ------------------------------------------------------------------------------- state dicts --


def _options_of(architecture: dict) -> StyleGAN2.Options:
    """StyleGAN2.Options from the TOML values ``stylegan2_options`` returned ("none" -> None)."""
    values = {k: (None if v == "none" else v) for k, v in architecture.items()}
    names = {f.name for f in attrs.fields(StyleGAN2.Options)}
    for key in values:
        if key not in names:
            raise GankitError(f"options.architecture.{key}: not an option of gankit's stylegan2 (pass the dict "
                              f"stylegan2_options returned)")
    return StyleGAN2.Options(**values)


def _gankit_entries(net: str, options: dict) -> dict[str, torch.Tensor]:
    """gankit's state dict entries of ``net`` for ``options``, as meta tensors (shapes and dtypes;
    built without memory or random draws)."""
    arch = StyleGAN2(_options_of(options["architecture"]),
                     BuildContext(resolution=options["resolution"], channels=options["channels"],
                                  num_classes=options["num_classes"]))
    with torch.device("meta"):
        G, D = arch.build(options["resolution"], options["channels"])
    return dict((G if net == "G" else D).state_dict())


#: G's upsampling 3x3 layers, whose kernels gankit stores flipped (see stylegan2_state_dict).
_UP_CONV_WEIGHT = re.compile(r"synthesis\.b\d+\.conv0\.weight")


def _mapping_name(key: str, prefix: str) -> str | None:
    """An official mapping network's parameter (``mapping.fc{i}`` / ``mapping.embed``) under
    gankit's ``prefix`` (G's ``mapping_network``, D's ``mapping``); None for another key."""
    m = re.fullmatch(r"mapping\.(?:fc(\d+)|(embed))\.(weight|bias)", key)
    if not m:
        return None
    return f"{prefix}.embed.{m[3]}" if m[2] else f"{prefix}.layers.{m[1]}.{m[3]}"


def _g_name(key: str) -> str | None:
    name = _mapping_name(key, "mapping_network")
    if name:
        return name
    if key == "mapping.w_avg":
        return "w_avg"
    if key == "synthesis.b4.const":
        return "const"
    m = re.fullmatch(r"synthesis\.b(\d+)\.(conv0|conv1|torgb|skip)\.(.+)", key)
    if not m:
        return None
    res, layer, rest = m[1], m[2], m[3]
    if layer == "torgb":
        return f"to_rgb.{res}.{rest}"
    if layer == "skip":
        return f"skips.{res}.{rest}"
    # The 4x4 block has conv1 only: gankit's first (and only) conv there.
    index = 0 if layer == "conv0" or res == "4" else 1
    return f"convs.{res}.{index}.{rest}"


def _d_name(key: str, resolution: int) -> str | None:
    name = _mapping_name(key, "mapping")
    if name:
        return name
    m = re.fullmatch(r"b4\.(fromrgb|conv|fc|out)\.(.+)", key)
    if m:
        return f"{'epilogue_from_rgb' if m[1] == 'fromrgb' else m[1]}.{m[2]}"
    m = re.fullmatch(r"b(\d+)\.(fromrgb|conv0|conv1|skip)\.(.+)", key)
    if not m or int(m[1]) not in (2 ** i for i in range(3, int(math.log2(resolution)) + 1)):
        return None
    index = int(math.log2(resolution)) - int(math.log2(int(m[1])))  # blocks from the input side
    if m[2] == "fromrgb":
        return f"from_rgb.{m[3]}" if index == 0 else f"blocks.{index}.from_rgb.{m[3]}"
    return f"blocks.{index}.{m[2]}.{m[3]}"


def stylegan2_state_dict(official: dict[str, torch.Tensor], net: Literal["G", "D"], options: dict
                         ) -> dict[str, torch.Tensor]:
    """An official StyleGAN2 G's or D's state dict under gankit's names, for the ``stylegan2``
    networks that ``options`` (what ``stylegan2_options`` returned for the same snapshot) builds.

    ``official``: name -> tensor, e.g. ``mapping.fc0.weight``, ``mapping.w_avg``,
    ``synthesis.b4.const``, ``synthesis.b8.conv0.affine.weight``, ``synthesis.b8.torgb.weight``
    (G), ``b16.fromrgb.weight``, ``b4.out.bias``, ``mapping.embed.weight`` (D). Every official
    tensor is used exactly once: the resampling filters (``*.resample_filter``, buffers gankit
    does not store) must equal the [1, 3, 3, 1] filter, every other one becomes one gankit
    entry with the same values (copied, float32) and the same shape, except the kernels of G's
    upsampling convolutions (``synthesis.b*.conv0.weight``), flipped in both spatial axes: the
    official code computes those layers as true convolutions, gankit every layer as a
    correlation (``F.conv2d``). Returns gankit's full state
    dict of that network. Raises GankitError naming the official key that has no place in
    gankit's network (or another shape), a filter that differs, or the gankit key no official
    tensor fills.
    """
    if net not in ("G", "D"):
        raise _refuse("net", net, "use 'G' or 'D'")
    expected = _gankit_entries(net, options)
    reference = torch.outer(torch.tensor(_FILTER, dtype=torch.float32), torch.tensor(_FILTER, dtype=torch.float32))
    reference = reference / reference.sum()
    out: dict[str, torch.Tensor] = {}
    for key, tensor in official.items():
        if key.rsplit(".", 1)[-1] == "resample_filter":
            t = torch.as_tensor(tensor).detach().to("cpu", torch.float32)
            if t.shape != reference.shape or not torch.allclose(t, reference, rtol=0, atol=1e-7):
                raise GankitError(f"{net}: {key}: the official network resamples with another filter than gankit's "
                                  f"[1, 3, 3, 1] (got {t.tolist()}); it cannot be imported")
            continue
        name = _g_name(key) if net == "G" else _d_name(key, options["resolution"])
        if name is None or name not in expected:
            raise GankitError(f"{net}: {key}: an official tensor with no place in gankit's stylegan2 {net} for these "
                              f"options (is the snapshot's {net} built with the init_kwargs the options came from?)")
        shape = tuple(expected[name].shape)
        if tuple(tensor.shape) != shape:
            raise GankitError(f"{net}: {key}: shape {tuple(tensor.shape)}, but gankit's {name} has {shape} (are the "
                              f"options from this snapshot's init_kwargs?)")
        tensor = tensor.detach().to("cpu", expected[name].dtype).clone()
        if net == "G" and _UP_CONV_WEIGHT.fullmatch(key):
            # The official upsampling layers convolve (flip_weight=False: the kernel flipped
            # against F.conv2d's correlation), gankit's correlate like every other layer.
            tensor = tensor.flip(2, 3)
        out[name] = tensor
    missing = [k for k in expected if k not in out]
    if missing:
        raise GankitError(f"{net}: gankit's {missing[0]} has no official tensor"
                          + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                          + f"; the snapshot's {net} lacks it (is it a StyleGAN2 {net} of these options?)")
    return out
