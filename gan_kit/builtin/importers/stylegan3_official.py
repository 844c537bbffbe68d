"""The official StyleGAN3 generator (Karras et al. 2021, github.com/NVlabs/stylegan3,
``training.networks_stylegan3.Generator``) as gankit's ``stylegan3``: the start of the importer
of official snapshots: the options from the Generator's constructor arguments and the names of its
tensors (reading the pickle itself is not done yet).

``stylegan3_options`` turns the official G's ``init_kwargs`` into gankit's ``stylegan3`` options
and refuses, in one line naming the argument, what gankit's networks do not compute the same way.

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

__all__ = ["stylegan3_state_dict", "stylegan3_options"]

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
