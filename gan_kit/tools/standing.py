"""Standing statistics of G's BatchNorm layers (Brock et al. 2019, "Large Scale GAN Training for
High Fidelity Natural Image Synthesis" (BigGAN), which samples with them; BigGAN-PyTorch's
``--use_standing_stats``, StudioGAN's ``-std_stat``): before drawing, G's BN running statistics are recomputed from G's own forwards
on many batches, instead of the EMA of training batches they hold - what BigGAN reports its
ImageNet figures with, and what makes a G trained with small BN batches draw well in eval mode.

How: every BatchNorm layer of G that tracks running statistics is reset (running mean 0, var 1,
count 0) and switched to a cumulative average (``momentum = None``: after k batches the running
mean is the mean of the k batch means, the running var the mean of the k unbiased batch
variances, as BigGAN-PyTorch's ``accumulate_standing_stats`` averages them); then ``batches``
batches of ``batch_size`` standard-normal z (and, for a class-conditional G, classes uniform
over all of them, StudioGAN's "totally_random") run through G without gradients, with the BN
layers alone in train mode; then their momentum and mode are restored. Only BN buffers change:
other layers stay in their mode (spectral norm's vectors do not move). The draws come from a
generator seeded ``seed`` on the CPU, so the statistics are the same for a seed on every run.

StudioGAN's own loop keeps BN's momentum 0.1 (an EMA over the batches) and draws a random batch
size per step (1 to ``-std_max``); this average over equal batches is BigGAN's.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from gan_kit.base.errors import GankitError
from gan_kit.training.ema import averaging_batchnorms

__all__ = ["standing_statistics", "tracked_batchnorms", "check_standing"]


def tracked_batchnorms(G: nn.Module) -> list[nn.Module]:
    """The BatchNorm layers of ``G`` that keep running statistics (``track_running_stats``)."""
    return [m for m in G.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def check_standing(batches: int, batch_size: int, option: str = "--standing-stats") -> None:
    """``GankitError`` (one line naming ``option``) for a count below 0 or a batch size below 2
    (BN in train mode needs 2 values a channel)."""
    if batches < 0:
        raise GankitError(f"{option}: {batches} batches; give a number of batches such as 100, or 0 for none")
    if batch_size < 2:
        raise GankitError(f"--standing-batch: {batch_size}; BatchNorm needs batches of 2 or more images (e.g. 64)")


def standing_statistics(G: nn.Module, batches: int, batch_size: int, latent_dim: int, num_classes: int = 0, *,
                        seed: int = 0, device: torch.device | str | None = None,
                        forward: Callable[[torch.Tensor, torch.Tensor | None], Any] | None = None,
                        who: str = "G") -> int:
    """Recompute the running statistics of ``G``'s BatchNorm layers from ``batches`` batches of
    ``batch_size`` latents ``z[batch_size, latent_dim]`` (classes ``[batch_size]`` uniform in
    ``[0, num_classes)`` for a class-conditional G), drawn from a CPU generator seeded ``seed``
    (module docstring). ``forward(z, labels)`` runs G (default ``G(z)`` / ``G(z, labels)``);
    ``device``: where z goes (default: G's parameters'). Returns the number of BN layers
    recomputed. Raises ``GankitError`` (one line naming ``who``) for a G without BatchNorm layers
    that track statistics; ``batches`` = 0 changes nothing and returns 0."""
    check_standing(batches, batch_size)
    norms = tracked_batchnorms(G)
    if not norms:
        raise GankitError(f"--standing-stats: {who} has no BatchNorm layer with running statistics to recompute "
                          f"(standing statistics are BigGAN's for BN generators); leave --standing-stats out")
    if batches == 0:
        return 0
    if forward is None:
        def forward(z: torch.Tensor, labels: torch.Tensor | None) -> Any:
            return G(z) if labels is None else G(z, labels)
    if device is None:
        p = next(iter(G.parameters()), None)
        device = p.device if p is not None else torch.device("cpu")
    gen = torch.Generator().manual_seed(int(seed))
    with averaging_batchnorms(norms), torch.no_grad():
        for _ in range(batches):
            z = torch.randn(batch_size, latent_dim, generator=gen)
            labels = torch.randint(num_classes, (batch_size,), generator=gen) if num_classes else None
            forward(z.to(device), labels.to(device) if labels is not None else None)
    return len(norms)
