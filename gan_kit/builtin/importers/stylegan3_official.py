"""The official StyleGAN3 generator (Karras et al. 2021, github.com/NVlabs/stylegan3,
``training.networks_stylegan3.Generator``) as gankit's ``stylegan3``: the start of the importer
of official snapshots (the names; options from the snapshot's arguments are not read yet).

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

import torch

from gan_kit.base.errors import GankitError

__all__ = ["stylegan3_state_dict"]

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
