"""The exponential moving average of G's weights, G_ema (Karras et al. 2018, section 5 / appendix
A.1: decay 0.999; StyleGAN2-ADA's half-life in kimg with ramp-up)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch
from torch import nn


def make_ema(G: nn.Module) -> nn.Module:
    """A frozen copy of G in eval mode that never receives gradients."""
    G_ema = copy.deepcopy(G).eval()
    G_ema.requires_grad_(False)
    return G_ema


def ema_beta(decay: float | None, half_life_kimg: float | None, rampup: float | None,
             batch_size: int, cur_nimg: int) -> float:
    """The per-step decay beta.

    A fixed ``decay`` when it is set (PGGAN's 0.999). Otherwise ``beta = 0.5 ** (batch_size /
    half_life_nimg)``, where ``half_life_nimg = min(half_life_kimg * 1000, cur_nimg * rampup)``
    when ``rampup`` is set (StyleGAN2-ADA, training_loop.py).
    """
    if decay is not None or half_life_kimg is None:
        return float(decay if decay is not None else 0.999)
    nimg = half_life_kimg * 1000.0
    if rampup is not None:
        nimg = min(nimg, cur_nimg * rampup)
    return 0.5 ** (batch_size / max(nimg, 1e-8))


@torch.no_grad()
def update_ema(G_ema: nn.Module, G: nn.Module, beta: float, skip: torch.Tensor | None = None) -> None:
    """``p_ema = beta * p_ema + (1 - beta) * p`` for every parameter; buffers are copied.

    beta = 0 makes G_ema equal G; beta = 1 leaves it unchanged (both exactly). ``skip``: a bool
    scalar tensor on the device; where true G_ema is left exactly as it is (a skipped iteration),
    decided on the device with no host sync (``lerp`` with weight 0 returns its start exactly).
    """
    pairs = [(e, p) for e, p in zip(G_ema.parameters(), G.parameters()) if p.requires_grad]
    ema_params = [e for e, _ in pairs]  # G's frozen parameters are not averaged: G_ema keeps its copies
    params = [p.detach() for _, p in pairs]
    if skip is None:
        if beta == 0.0:
            torch._foreach_copy_(ema_params, params)
        elif beta != 1.0:
            torch._foreach_lerp_(ema_params, params, 1.0 - beta)
        for b_ema, b in zip(G_ema.buffers(), G.buffers()):
            b_ema.copy_(b)
        return
    if beta != 1.0 and ema_params:
        weight = torch.where(skip, 0.0, 1.0 - beta).to(ema_params[0].dtype)
        torch._foreach_lerp_(ema_params, params, [weight] * len(ema_params))
    for b_ema, b in zip(G_ema.buffers(), G.buffers()):
        b_ema.copy_(torch.where(skip, b_ema, b))


@torch.no_grad()
def refresh_batchnorm(G_ema: nn.Module, latent, autocast, batches: int = 16, batch_size: int = 64) -> None:
    """Recompute the running statistics of every BatchNorm layer of ``G_ema`` from its own
    forwards: ``batches`` batches of ``latent(batch_size)`` latents, averaged with equal weights
    (the same thing ``torch.optim.swa_utils.update_bn`` does for averaged weights, Izmailov et al.
    2018, sec. 3.2). G_ema's weights are an average of G's; G's running statistics, which the
    per-step update copies, describe G's activations, not G_ema's. A no-op without BatchNorm.

    Only the BatchNorm layers run in train mode; every other layer keeps its mode (eval in
    G_ema), so spectral norm's power iteration (``sngan-resnet``, ``biggan``) does not step its
    ``u``, ``v`` during the refresh: the statistics are those of the very network that then
    samples, whose sigma the stored vectors give."""
    norms = [m for m in G_ema.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    with averaging_batchnorms(norms):
        for _ in range(batches):
            inputs = latent(batch_size)  # z, or a tuple (z, labels) for a conditional G
            with autocast():
                G_ema(*(inputs if isinstance(inputs, tuple) else (inputs,)))


@contextlib.contextmanager
def averaging_batchnorms(norms: list[nn.Module]) -> Iterator[None]:
    """Inside: each BatchNorm layer of ``norms`` reset (running mean 0, var 1, count 0), in
    train mode and with ``momentum = None``, so the forwards run inside leave as running
    statistics the equal-weight average of their batch statistics; after (also on an error):
    each layer's momentum and mode as before. Other layers are not touched."""
    saved = [(m.momentum, m.training) for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches run inside
        m.train()
    try:
        yield
    finally:
        for m, (momentum, training) in zip(norms, saved):
            m.momentum = momentum
            m.train(training)
