"""Conditional batch norm: batch norm whose per-channel gain and bias are linear maps of a
conditioning vector (de Vries et al. 2017, "Modulating early visual processing by language",
sec. 3.1; SNGAN, Miyato & Koyama 2018, sec. 4: the vector a one-hot class; BigGAN, Brock et al.
2019, sec. 3 and appendix B: a shared class embedding joined to a chunk of z). Public
(``gan_kit.ConditionalBatchNorm2d``) so a plugin's class-conditional G can use it; the built-in
``sngan-resnet``, ``sagan`` and ``biggan`` do."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ConditionalBatchNorm2d"]


class ConditionalBatchNorm2d(nn.Module):
    """``(x[N, C, H, W], y[N, cond_dim]) -> bn(x) * (1 + gain(y)) + bias(y)``: ``bn`` a
    ``BatchNorm2d`` without affine parameters (its running statistics in ``bn``), ``gain`` and
    ``bias`` bias-free ``Linear(cond_dim, C)`` layers, so a zero map leaves the normalised input
    as it is. ``y``: a one-hot class (SNGAN's cBN: each class's gain and bias are a column of the
    weights, a class embedding), or BigGAN's shared class embedding joined to a chunk of z.
    ``eps`` and ``momentum`` those of the batch norm (StudioGAN: 1e-4, 0.1). Any architecture may
    use it; wrap ``gain`` / ``bias`` in a weight parametrization (spectral norm) after building.
    The running statistics live in a ``BatchNorm2d``, so G_ema's refresh of its batch-norm
    statistics and ``--standing-stats`` reach them."""

    def __init__(self, channels: int, cond_dim: int, eps: float = 1e-4, momentum: float = 0.1):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, eps=eps, momentum=momentum, affine=False)
        self.gain = nn.Linear(cond_dim, channels, bias=False)
        self.bias = nn.Linear(cond_dim, channels, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gain = (1 + self.gain(y)).view(y.shape[0], -1, 1, 1)
        bias = self.bias(y).view(y.shape[0], -1, 1, 1)
        return self.bn(x) * gain + bias
