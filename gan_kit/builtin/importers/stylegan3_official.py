"""The official StyleGAN3 networks (Karras et al. 2021, github.com/NVlabs/stylegan3,
``training.networks_stylegan3.Generator`` and the ``networks_stylegan2.Discriminator`` its
train.py pairs with it) as gankit's ``stylegan3``: the options from the constructor arguments and
the names of the tensors (``gan_kit.builtin.importers.snapshots`` reads the pickle).

``stylegan3_options`` turns the official G's ``init_kwargs`` into gankit's ``stylegan3`` options
and refuses, in one line naming the argument, what gankit's networks do not compute the same way.

``stylegan3_d_options`` checks the official D's arguments against the G's options (gankit's
``stylegan3`` D shares G's ``channel_base``, ``channel_max`` and ``conv_clamp``, as train.py
builds them) and returns D's own option (``mbstd_group_size``). ``stylegan3_networks`` gives the
state dicts of G_ema, G and D in gankit's names, checked by loading them into the networks the
options build, the official filters compared with gankit's designs.

``stylegan3_state_dict`` renames an official G's ``state_dict()`` to gankit's G: ``mapping.fc{i}``
-> ``mapping_network.layers.{i}``, ``mapping.embed`` -> ``mapping_network.embed``,
``mapping.w_avg`` -> ``w_avg``, ``synthesis.input.*`` -> ``synthesis_network.input.*``, the
layer ``synthesis.L{i}_{size}_{channels}.*`` -> ``synthesis_network.layers.{i}.*``. The layers'
``up_filter`` / ``down_filter`` are returned apart (``filters``): gankit designs them from its
options and does not store them, so the caller compares them with its own (an official snapshot
built with other filter options must be refused, not silently refiltered).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from gan_kit.base.errors import GankitError
from gan_kit.builtin.architectures.stylegan3 import StyleGAN3
from gan_kit.plugin_api.components import BuildContext

__all__ = ["stylegan3_state_dict", "stylegan3_options", "stylegan3_d_options", "stylegan3_d_as_stylegan2",
           "stylegan3_networks"]

#: Official synthesis arguments gankit fixes at the paper's values: a snapshot must hold these.
_FIXED = {"first_cutoff": 2, "first_stopband": 2 ** 2.1, "last_stopband_rel": 2 ** 0.3, "output_scale": 0.25,
          "filter_size": 6, "lrelu_upsampling": 2}
#: Arguments that do not change the function on gankit's devices (fp16 is the recipe's precision).
_DROPPED = ("num_fp16_res",)
#: gankit's option for an official synthesis argument, with the official default.
_RENAMED = {"num_layers": ("num_layers", 14), "num_critical": ("num_critical", 2),
            "margin_size": ("margin_size", 10), "conv_clamp": ("conv_clamp", 256),
            "magnitude_ema_beta": ("magnitude_ema_beta", 0.999)}


def _refuse(key: str, value: Any, fix: str) -> GankitError:
    return GankitError(f"official StyleGAN3 G: {key} = {value!r}: {fix}")


def stylegan3_options(G_kwargs: dict) -> dict:
    """gankit's recipe values for an official ``networks_stylegan3.Generator`` built with
    ``G_kwargs`` (z_dim, c_dim, w_dim, img_resolution, img_channels, mapping_kwargs and the
    synthesis and layer arguments). Returns ``{"resolution", "channels", "num_classes",
    "architecture": {stylegan3 option: value}}``: config "r" for 1x1 convolutions with radial
    filters (channel_base and channel_max halved: the option is the undoubled value, as
    train.py's ``--cbase``), "t" for 3x3 without. GankitError naming the first argument gankit
    cannot follow (another kernel / filter combination, a non-default schedule constant, an odd
    R width, an unknown argument)."""
    kw = dict(G_kwargs)
    mapping = dict(kw.pop("mapping_kwargs", {}) or {})
    out = {"resolution": int(kw.pop("img_resolution")), "channels": int(kw.pop("img_channels")),
           "num_classes": int(kw.pop("c_dim", 0))}
    arch: dict[str, Any] = {"latent_dim": int(kw.pop("z_dim")), "w_dim": int(kw.pop("w_dim"))}
    kernel, radial = kw.pop("conv_kernel", 3), bool(kw.pop("use_radial_filters", False))
    if (kernel, radial) not in ((3, False), (1, True)):
        raise _refuse("conv_kernel, use_radial_filters", (kernel, radial),
                      "gankit's stylegan3 has config \"t\" (3, False) and \"r\" (1, True) only")
    r = radial
    arch["config"] = "r" if r else "t"
    for key in ("channel_base", "channel_max"):
        value = int(kw.pop(key, 32768 if key == "channel_base" else 512))
        if r and value % 2:
            raise _refuse(key, value, "config \"r\" doubles an integer option, so it must be even")
        arch[key] = value // 2 if r else value
    for key, (option, default) in _RENAMED.items():
        arch[option] = kw.pop(key, default)
    if arch["conv_clamp"] is not None:
        arch["conv_clamp"] = float(arch["conv_clamp"])
    for key, value in _FIXED.items():
        got = kw.pop(key, value)
        if abs(float(got) - value) > 1e-12:
            raise _refuse(key, got, f"gankit's stylegan3 uses the paper's {value:g}")
    for key in _DROPPED:
        kw.pop(key, None)
    if kw:
        key = sorted(kw)[0]
        raise _refuse(key, kw[key], "not an argument gankit's stylegan3 importer knows (remove it, or import by hand)")
    arch["mapping_layers"] = int(mapping.pop("num_layers", 2))
    arch["mapping_lr_mult"] = float(mapping.pop("lr_multiplier", 0.01))
    arch["w_avg_beta"] = float(mapping.pop("w_avg_beta", 0.998))
    if mapping:
        key = sorted(mapping)[0]
        raise _refuse(f"mapping_kwargs.{key}", mapping[key], "not an argument of the official MappingNetwork")
    out["architecture"] = arch
    return out

_LAYER = re.compile(r"synthesis\.L(\d+)_\d+_\d+\.(.+)")


def stylegan3_state_dict(official: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor],
                                                                      dict[tuple[int, str], torch.Tensor]]:
    """``(state, filters)``: gankit's G state dict (every tensor of ``official`` but the filters,
    renamed) and the filters by ``(layer index, "up_filter" | "down_filter")``. GankitError, naming
    the key, for a key the official G does not have."""
    state: dict[str, torch.Tensor] = {}
    filters: dict[tuple[int, str], torch.Tensor] = {}
    for key, value in official.items():
        m = re.fullmatch(r"mapping\.(?:fc(\d+)|(embed))\.(weight|bias)", key)
        if m:
            state[f"mapping_network.embed.{m[3]}" if m[2] else f"mapping_network.layers.{m[1]}.{m[3]}"] = value
        elif key == "mapping.w_avg":
            state["w_avg"] = value
        elif key.startswith("synthesis.input."):
            state["synthesis_network." + key[len("synthesis."):]] = value
        elif (m := _LAYER.fullmatch(key)) and m[2] in ("up_filter", "down_filter"):
            filters[(int(m[1]), m[2])] = value
        elif m:
            state[f"synthesis_network.layers.{m[1]}.{m[2]}"] = value
        else:
            raise GankitError(f"official StyleGAN3 G: {key!r} is not a key of networks_stylegan3.Generator "
                              f"(a StyleGAN2 or edited snapshot? import it with its own importer)")
    return state, filters



def _refuse_d(key: str, value: Any, fix: str) -> GankitError:
    return GankitError(f"official StyleGAN3 D: {key} = {value!r}: {fix}")


def _take_equal(kw: dict, key: str, default: Any, want: Any, fix: str, where: str = "") -> None:
    got = kw.pop(key, default)
    if got != want:
        raise _refuse_d(where + key, got, fix)


def stylegan3_d_options(D_kwargs: dict, config: dict) -> dict:
    """gankit's D options for the official ``networks_stylegan2.Discriminator`` built with
    ``D_kwargs`` beside the G of ``config`` (what ``stylegan3_options`` returned):
    ``{"mbstd_group_size": n}``. GankitError naming the first argument gankit's ``stylegan3`` D
    does not compute the same way: another data shape than G's, another architecture than
    "resnet", widths or ``conv_clamp`` other than G's (gankit's D shares them, as train.py's
    ``--cbase`` / ``--cmax``), a label mapping other than the default 8 layers at lr x0.01, a
    minibatch-stddev layer other than one channel over groups >= 1, an unknown argument.
    ``num_fp16_res``, ``freeze_layers`` and memory formats are dropped (the same function)."""
    kw = dict(D_kwargs)
    arch = config["architecture"]
    for key, want in (("img_resolution", config["resolution"]), ("img_channels", config["channels"]),
                      ("c_dim", config["num_classes"])):
        _take_equal(kw, key, 0 if key == "c_dim" else None, want, f"G has {want}; gankit builds G and D for one data set")
    _take_equal(kw, "architecture", "resnet", "resnet", "gankit's stylegan3 D is StyleGAN2's residual D ('resnet')")
    for key, default in (("channel_base", 32768), ("channel_max", 512)):
        _take_equal(kw, key, default, arch[key], f"gankit's stylegan3 D has G's {key} ({arch[key]}, the undoubled "
                                                  f"value for config r), as train.py builds it")
    clamp = kw.pop("conv_clamp", 256)
    if (None if clamp is None else float(clamp)) != arch["conv_clamp"]:
        raise _refuse_d("conv_clamp", clamp, f"gankit's stylegan3 D has G's conv_clamp ({arch['conv_clamp']!r})")
    cmap = min(arch["channel_base"] // 4, arch["channel_max"])
    cmap_dim = kw.pop("cmap_dim", None)
    if cmap_dim not in (None, cmap):
        raise _refuse_d("cmap_dim", cmap_dim, f"gankit's stylegan3 D projects labels to {cmap} (the 4x4 block's width)")
    kw.pop("num_fp16_res", None)
    block = dict(kw.pop("block_kwargs", None) or {})
    for key in ("freeze_layers", "fp16_channels_last"):
        block.pop(key, None)  # a training setting and a memory format: the same function
    _take_equal(block, "activation", "lrelu", "lrelu", "the leaky ReLU activation ('lrelu')", "block_kwargs.")
    mapping = dict(kw.pop("mapping_kwargs", None) or {})
    if config["num_classes"]:
        _take_equal(mapping, "num_layers", 8, 8, "gankit's stylegan3 D maps labels with 8 layers", "mapping_kwargs.")
        _take_equal(mapping, "lr_multiplier", 0.01, 0.01, "gankit's stylegan3 D maps labels at lr x0.01",
                    "mapping_kwargs.")
        for key in ("embed_features", "layer_features"):
            _take_equal(mapping, key, None, None, f"gankit's D label mapping is {cmap} wide throughout",
                        "mapping_kwargs.")
        _take_equal(mapping, "activation", "lrelu", "lrelu", "the leaky ReLU activation ('lrelu')", "mapping_kwargs.")
    else:
        mapping.clear()  # an unconditional D builds no label mapping: its settings change nothing
    epilogue = dict(kw.pop("epilogue_kwargs", None) or {})
    group = epilogue.pop("mbstd_group_size", 4)
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise _refuse_d("epilogue_kwargs.mbstd_group_size", group, "gankit's D needs a group size >= 1 (None, the "
                                                                   "whole batch, is not implemented)")
    _take_equal(epilogue, "mbstd_num_channels", 1, 1, "gankit's stylegan3 D has one minibatch-stddev channel",
                "epilogue_kwargs.")
    _take_equal(epilogue, "activation", "lrelu", "lrelu", "the leaky ReLU activation ('lrelu')", "epilogue_kwargs.")
    for where, rest in (("", kw), ("block_kwargs.", block), ("mapping_kwargs.", mapping),
                        ("epilogue_kwargs.", epilogue)):
        if rest:
            key = sorted(rest)[0]
            raise _refuse_d(where + key, rest[key], "not an argument gankit's stylegan3 importer knows (remove it, "
                                                    "or import by hand)")
    return {"mbstd_group_size": group}


def _load_checked(net: torch.nn.Module, state: dict[str, torch.Tensor], name: str) -> None:
    """Load ``state`` into ``net`` (strict, shapes checked) or raise one GankitError line."""
    want = net.state_dict()
    for key in want:
        if key not in state:
            raise GankitError(f"official StyleGAN3 {name}: gankit's {key} has no official tensor (a network built "
                              f"with other arguments than its init_kwargs?)")
    for key, value in state.items():
        if key not in want:
            raise GankitError(f"official StyleGAN3 {name}: {key} has no place in gankit's stylegan3 {name}")
        if tuple(value.shape) != tuple(want[key].shape):
            raise GankitError(f"official StyleGAN3 {name}: {key} has shape {tuple(value.shape)}, gankit's "
                              f"{tuple(want[key].shape)} (a network built with other arguments than its init_kwargs?)")
    net.load_state_dict(state, strict=True)


def stylegan3_d_as_stylegan2(config: dict) -> dict:
    """The options of gankit's ``stylegan2`` whose D is the ``stylegan3`` D of ``config`` (the
    same residual D, widths, labels and minibatch stddev), in ``stylegan2_options``' layout: what
    ``stylegan2_official.stylegan2_state_dict(official_D, "D", ...)`` renames an official
    ``networks_stylegan2.Discriminator``'s tensors with."""
    arch = config["architecture"]
    return {"resolution": config["resolution"], "channels": config["channels"], "num_classes": config["num_classes"],
            "architecture": {"channel_base": arch["channel_base"], "channel_max": arch["channel_max"],
                             "mbstd_group_size": arch.get("mbstd_group_size", 4)}}


def stylegan3_networks(config: dict, G_ema: dict[str, torch.Tensor], G: dict[str, torch.Tensor] | None = None,
                       D: dict[str, torch.Tensor] | None = None) -> dict[str, dict[str, torch.Tensor] | None]:
    """``{"G_ema", "G", "D"}``: the official state dicts (``G_ema``, ``G``: a
    ``networks_stylegan3.Generator``'s; ``D``: a ``networks_stylegan2.Discriminator``'s already
    renamed by ``stylegan2_state_dict`` with ``stylegan3_d_as_stylegan2(config)``; None where the
    file has none) in gankit's names for the ``stylegan3`` networks of ``config``
    (``stylegan3_options``' result with D's ``mbstd_group_size`` in its architecture). Each is
    loaded into those networks (strict, shapes checked), and every layer's official ``up_filter``
    / ``down_filter`` must equal gankit's design to 1e-6 (gankit does not store them: a snapshot
    built with other filters would be silently refiltered). GankitError naming the network and
    the tensor otherwise."""
    arch = config["architecture"]
    net = StyleGAN3(StyleGAN3.Options(**arch), BuildContext(resolution=config["resolution"],
                                                            channels=config["channels"],
                                                            num_classes=config["num_classes"]))
    ours_G, ours_D = net.build(config["resolution"], config["channels"])
    out: dict[str, dict[str, torch.Tensor] | None] = {"G_ema": None, "G": None, "D": None}
    for name, official in (("G_ema", G_ema), ("G", G)):
        if official is None:
            continue
        state, filters = stylegan3_state_dict(official)
        state = {k: v.detach().to("cpu", torch.float32).clone() if v.is_floating_point() else v.detach().clone()
                 for k, v in state.items()}
        for i, layer in enumerate(ours_G.synthesis_network.layers):
            for kind in ("up_filter", "down_filter"):
                mine, theirs = getattr(layer, kind), filters.pop((i, kind), None)
                same = (mine is None and theirs is None) or (
                    mine is not None and theirs is not None and tuple(mine.shape) == tuple(theirs.shape)
                    and torch.allclose(mine, theirs.float(), rtol=0, atol=1e-6))
                if not same:
                    raise GankitError(f"official StyleGAN3 {name}: layer {i}'s {kind} differs from gankit's design for "
                                      f"these options (another filter design?); it cannot be imported")
        if filters:
            i, kind = sorted(filters)[0]
            raise GankitError(f"official StyleGAN3 {name}: layer {i}'s {kind} has no layer in gankit's network")
        _load_checked(ours_G, state, name)
        out[name] = state
    if D is not None:
        _load_checked(ours_D, D, "D")
        out["D"] = D
    return out
