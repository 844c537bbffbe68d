"""The networks as the engine trains them: spectral normalisation where the recipe asks, and the
views strategies and penalties run through - DistributedDataParallel wrappers under several
processes, ``torch.compile`` when asked, and the augmentation of every image D sees."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gan_kit.components import AugmentedD
from gan_kit.errors import GankitError

__all__ = ["apply_spectral_norm", "training_views"]


def training_views(G: nn.Module, D: nn.Module, *, recipe: Any, device: torch.device, world_size: int,
                   augment: Any = None) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """``(G_train, D_train, G_penalty, D_penalty)``: what strategies run forwards through, and
    what penalties do (eager - compiled graphs have no double backward - but still the DDP
    wrappers, so a penalty-only backward is averaged too). All share G's and D's parameters.

    Under several processes with ``run.grad_sync = "ddp"`` G and D are wrapped in DDP, then
    compiled when asked (``torch.compile(DDP(net))`` lets Dynamo split graphs at DDP's buckets);
    with an augmentation, D applies it to its input outside any compiled graph (an augmentation's
    parameters, such as ADA's p, change during training).
    """
    G_train, D_train = G, D
    if world_size > 1 and recipe.run.grad_sync == "ddp":
        from gan_kit.distributed import wrap_ddp

        G_train, D_train = wrap_ddp(G, device), wrap_ddp(D, device)
    G_penalty, D_penalty = G_train, D_train
    if recipe.run.compile:
        G_train = _compile(G_train, recipe.run.compile_backend)
        D_train = _compile(D_train, recipe.run.compile_backend)
    if augment is not None:
        D_train, D_penalty = AugmentedD(D_train, augment), AugmentedD(D_penalty, augment)
    return G_train, D_train, G_penalty, D_penalty


def apply_spectral_norm(net: nn.Module, name: str, recipe: Any) -> None:
    """Spectral normalisation (Miyato et al. 2018, sec. 2.1) of every conv / linear weight of
    ``net``: ``W / sigma(W)`` with sigma from one power iteration per training-mode forward; its
    vectors u, v are buffers, so checkpoints keep them and eval mode (G_ema) reuses them."""
    from torch.nn.utils.parametrizations import spectral_norm

    from gan_kit.layers import weight_layers

    layers = weight_layers(net)
    if not layers:
        raise GankitError(f"{recipe.path}: architecture.spectral_norm: {recipe.architecture.name!r} has no "
                          f"torch conv / linear layers in {name} to normalise (set spectral_norm = \"none\")")
    for layer in layers:
        spectral_norm(layer)


def _compile(net: nn.Module, backend: str) -> nn.Module:
    """``torch.compile(net)``. AOTAutograd's donated buffers forbid ``retain_graph=True`` in a
    backward through a compiled graph, which a strategy that backpropagates one graph twice
    (``shared-fake``) needs; turning donation off costs only some buffer reuse in the backward."""
    from torch._functorch import config as functorch_config

    functorch_config.donated_buffer = False
    return torch.compile(net, backend=backend)
