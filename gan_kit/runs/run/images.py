"""G's images for given latents at a phase (``generate``), as hooks and metrics draw them: in eval
mode, in batches, at the run's precision, from a forked RNG so that the training RNG never moves
and a run resumes exactly whatever its hooks sampled."""

from __future__ import annotations

from typing import Callable, ContextManager

import torch
from torch import nn

from gan_kit.plugin_api.components import set_phase
from gan_kit.base.phase import Phase

__all__ = ["generate"]


@torch.no_grad()
def generate(net: nn.Module, z: torch.Tensor, *, phase: Phase, device: torch.device,
             autocast: Callable[[], ContextManager], batch: int = 64, labels: torch.Tensor | None = None,
             seed: int | None = None, restore: Phase | None = None) -> torch.Tensor:
    """Images ``[N,C,r,r]`` (float32, CPU) of ``net`` (a generator, run in eval mode) for latents
    ``z[N, latent_dim]`` at ``phase``, ``batch`` at a time on ``device`` under ``autocast``.
    ``labels[N]``: the classes, in a conditional run. ``seed``: the random state G's own draws
    (StyleGAN2's noise inputs) start from, so the images depend on the weights, ``z`` and ``seed``
    only (metrics); None = wherever the RNG stands (still never moving the training RNG).
    ``restore``: the phase ``net`` is set back to afterwards (the run's current one)."""
    was_training = net.training
    net.eval()
    set_phase(net, phase.resolution, phase.alpha)
    out = []
    # A generator may draw noise (StyleGAN2's noise inputs): from a forked RNG, so sampling
    # never moves the training RNG (exact resume).
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(seed)
        for i in range(0, z.shape[0], batch):
            args = [z[i:i + batch].to(device)]
            if labels is not None:
                args.append(labels[i:i + batch].to(device))
            with autocast():
                out.append(net(*args).float().cpu())
    net.train(was_training)
    if restore is not None:
        set_phase(net, restore.resolution, restore.alpha)
    return torch.cat(out)
