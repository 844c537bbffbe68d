"""The networks as the engine trains them: spectral normalisation where the recipe asks, and the
views strategies and penalties run through - DistributedDataParallel wrappers under several
processes, ``torch.compile`` when asked, and the augmentation of every image D sees."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gan_kit.plugin_api.components import AugmentedD
from gan_kit.base.errors import GankitError

__all__ = ["apply_spectral_norm", "training_views", "AtPrecision", "at_precision", "find_ddp", "plan_recompiles",
           "GRAPHS_PER_PHASE"]


class AtPrecision(nn.Module):
    """``net`` at the run's precision, whoever calls it: its forward runs under the run's
    autocast (bf16 / fp16) and floating-point outputs come back as float32.

    What gankit hands strategies and penalties (``ctx.G``, ``ctx.D``, ``inputs.G``,
    ``inputs.D``) under ``run.precision = "bf16"`` / ``"fp16"``, so plugin code written in plain
    float32 PyTorch - no ``ctx.autocast()``, no ``.float()`` - trains unchanged: its own
    arithmetic sees float32 tensors only, while the networks' convolutions and matmuls run in
    the low precision. This is PyTorch's AMP recipe (forwards under autocast, losses and
    ``torch.autograd.grad`` outside it; "Automatic Mixed Precision examples", gradient
    penalty), applied at the network boundary. The float32 cast is exact, and a following
    autocast conv casts back to the same bf16/fp16 values. Attributes the wrapper lacks
    (``G.mapping``) are ``net``'s; calling such a sub-network directly runs it outside autocast
    (float32), unless the caller enters ``ctx.autocast()``.
    """

    def __init__(self, net: nn.Module, autocast: Any):
        super().__init__()
        self.module = net  # `module`, as DDP names it: set_phase and find_ddp look through it
        self._autocast = autocast

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            out = self.module(*args, **kwargs)
        return _as_float32(out)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["module"], name)


def at_precision(views: tuple[nn.Module, ...], autocast: Any) -> tuple[nn.Module, ...]:
    """Each of ``views`` wrapped in ``AtPrecision``; a module that appears twice (G_train is
    G_penalty when nothing is compiled) gets one wrapper, so identity checks still hold."""
    wrapped = {id(v): AtPrecision(v, autocast) for v in views}
    return tuple(wrapped[id(v)] for v in views)


def _as_float32(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.float() if out.is_floating_point() else out
    if isinstance(out, (tuple, list)):
        return type(out)(_as_float32(o) for o in out)
    if isinstance(out, dict):
        return {k: _as_float32(v) for k, v in out.items()}
    return out


def training_views(G: nn.Module, D: nn.Module, *, recipe: Any, device: torch.device, world_size: int,
                   augment: Any = None) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """``(G_train, D_train, G_penalty, D_penalty)``: what strategies run forwards through, and
    what penalties do (eager - compiled graphs have no double backward - but still the DDP
    wrappers, so a penalty-only backward is averaged too). All share G's and D's parameters.

    Under several CUDA processes BatchNorm layers become ``SyncBatchNorm`` (in place). Under
    several processes with ``run.grad_sync = "ddp"`` G and D are wrapped in DDP
    (``find_unused_parameters`` only when ``growth.name`` is not "static"), then
    compiled when asked (``torch.compile(DDP(net))`` lets Dynamo split graphs at DDP's buckets);
    with an augmentation, D applies it to its input outside any compiled graph (an augmentation's
    parameters, such as ADA's p, change during training).
    """
    G_train, D_train = G, D
    if world_size > 1:
        from gan_kit.training.distributed import sync_batchnorm

        for net in (G, D):
            sync_batchnorm(net, device, world_size)
    if world_size > 1 and recipe.run.grad_sync == "ddp":
        from gan_kit.training.distributed import wrap_ddp

        growing = recipe.growth.name != "static"  # a growing schedule leaves parameters unused in a phase
        G_train, D_train = wrap_ddp(G, device, growing=growing), wrap_ddp(D, device, growing=growing)
    G_penalty, D_penalty = G_train, D_train
    if recipe.run.compile:
        G_train = _compile(G_train, recipe.run.compile_backend)
        D_train = _compile(D_train, recipe.run.compile_backend)
    if augment is not None:
        D_train, D_penalty = AugmentedD(D_train, augment), AugmentedD(D_penalty, augment)
    return G_train, D_train, G_penalty, D_penalty


def find_ddp(module: nn.Module) -> DDP | None:
    """The ``DistributedDataParallel`` wrapper ``module`` is or holds (through ``torch.compile``'s
    ``_orig_mod``, the augmentation wrapper and ``AtPrecision``: the views ``training_views`` and
    ``at_precision`` build), else None."""
    while module is not None:
        if isinstance(module, DDP):
            return module
        if isinstance(module, AugmentedD):
            module = module.net
        elif isinstance(module, AtPrecision):
            module = module.module
        else:
            module = getattr(module, "_orig_mod", None)
    return None


def initialise(net: nn.Module, initializer: Any, owns_init: bool = False) -> None:
    """The recipe's initializer on ``net``, where the architecture allows
    (``gan_kit.plugin_api.ownership.recipe_layers``): every conv / linear layer but frozen ones and those the
    architecture initialised itself (``own_init``; all of them when it ``owns_init``).
    ``initializer.apply`` gets ``net`` whole when it may touch every layer, else each allowed
    layer on its own."""
    from gan_kit.base.layers import weight_layers
    from gan_kit.plugin_api.ownership import recipe_layers

    layers = recipe_layers(net, "init", owns_init)
    if len(layers) == len(weight_layers(net)):
        initializer.apply(net)
        return
    for layer in layers:
        initializer.apply(layer)


def apply_spectral_norm(net: nn.Module, name: str, recipe: Any) -> None:
    """Spectral normalisation (Miyato et al. 2018, sec. 2.1) of every conv / linear weight of
    ``net`` but frozen ones and those marked ``own_init(module, spectral_norm=False)``:
    ``W / sigma(W)`` with sigma from one power iteration per training-mode forward; its
    vectors u, v are buffers, so checkpoints keep them and eval mode (G_ema) reuses them."""
    from torch.nn.utils.parametrizations import spectral_norm

    from gan_kit.plugin_api.ownership import recipe_layers

    layers = recipe_layers(net, "spectral_norm")
    if not layers:
        raise GankitError(f"{recipe.path}: architecture.spectral_norm: {recipe.architecture.name!r} has no "
                          f"torch conv / linear layers in {name} to normalise (set spectral_norm = \"none\")")
    for layer in layers:
        spectral_norm(layer)


#: Graphs torch.compile makes per network and growth phase: the network's forward runs trained
#: and frozen (requires_grad off, or no_grad for D's fakes), and the resolution is a Python int,
#: so each phase has its own pair. Measured with dynamo's counters in tests/test_compile.py.
GRAPHS_PER_PHASE = 2


def plan_recompiles(phases: int) -> int:
    """Raise dynamo's per-function recompile limit (``recompile_limit``, formerly
    ``cache_size_limit``; 8 by default) to what ``phases`` growth phases need, with room for
    one more variant per phase, so a long progressive run never falls back to eager for its
    later phases. Returns the limit set."""
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    limit = max(getattr(config, name), (GRAPHS_PER_PHASE + 1) * phases)
    setattr(config, name, limit)
    return limit


def _compile(net: nn.Module, backend: str) -> nn.Module:
    """``torch.compile(net)``. AOTAutograd's donated buffers forbid ``retain_graph=True`` in a
    backward through a compiled graph, which a strategy that backpropagates one graph twice
    (``shared-fake``) needs; turning donation off costs only some buffer reuse in the backward."""
    from torch._functorch import config as functorch_config

    functorch_config.donated_buffer = False
    return torch.compile(net, backend=backend)
