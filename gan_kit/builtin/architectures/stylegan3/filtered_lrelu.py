"""StyleGAN3's filtered leaky ReLU in plain PyTorch (Karras et al. 2021, arXiv:2106.12423, sec.
3.2, fig. 4b, appendix C): the nonlinearity of an alias-free layer applied at a higher sampling
rate - bias, upsample with a low-pass filter, leaky ReLU times a gain, clamp, low-pass filter and
downsample.

``upfirdn2d`` here takes a 1-D (separable: the taps along x, then along y) or 2-D filter, as the
paper's code's reference path. The downsampling keeps every ``down``-th output by a strided
convolution, which computes the same sums as filtering everything and discarding the rest.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["upfirdn2d", "filtered_lrelu"]


def upfirdn2d(x: torch.Tensor, f: torch.Tensor | None, *, up: int = 1, down: int = 1,
              padding: Sequence[int] = (0, 0, 0, 0), gain: float = 1.0) -> torch.Tensor:
    """Upsample, pad, FIR-filter and downsample every channel of ``x[N, C, H, W]``.

    Per channel: ``up - 1`` zeros after every pixel (both directions), ``padding = [x0, x1, y0,
    y1]`` zeros around (negative: cropped), convolution with ``f`` times ``gain`` (``f[k]``:
    separable, ``f * gain ** 0.5`` along x then along y; ``f[k, k]``: 2-D, ``f * gain``; None:
    the 1x1 filter ``gain``), only outputs whose footprint lies inside, every ``down``-th kept.
    Returns ``[N, C, (H * up + y0 + y1 - k) // down + 1, (W * up + x0 + x1 - k) // down + 1]``."""
    n, c, h, w = x.shape
    x0, x1, y0, y1 = (int(v) for v in padding)
    if up > 1:
        x = F.pad(x.reshape(n, c, h, 1, w, 1), (0, up - 1, 0, 0, 0, up - 1)).reshape(n, c, h * up, w * up)
    x = F.pad(x, (max(x0, 0), max(x1, 0), max(y0, 0), max(y1, 0)))
    x = x[:, :, max(-y0, 0):x.shape[2] - max(-y1, 0), max(-x0, 0):x.shape[3] - max(-x1, 0)]
    if f is None:
        f = torch.ones(1, 1, dtype=torch.float32, device=x.device)
    # A convolution, i.e. the flipped filter correlated (the low-pass filters are symmetric).
    f = (f * gain ** (f.ndim / 2)).flip(list(range(f.ndim))).to(x.dtype)
    if f.ndim == 2:
        return F.conv2d(x, f.expand(c, 1, *f.shape), groups=c, stride=down)
    x = F.conv2d(x, f.reshape(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c, stride=(1, down))
    return F.conv2d(x, f.reshape(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c, stride=(down, 1))


def filtered_lrelu(x: torch.Tensor, fu: torch.Tensor | None, fd: torch.Tensor | None, b: torch.Tensor, *,
                   up: int, down: int, padding: Sequence[int], gain: float, slope: float,
                   clamp: float | None) -> torch.Tensor:
    """``x[N, C, H, W]`` plus the bias ``b[C]``, upsampled by ``up`` with ``fu`` (gain ``up ** 2``
    keeps a constant image's value) and padded by ``padding = [x0, x1, y0, y1]``, then leaky ReLU
    (``slope``; 1 = linear) times ``gain``, clamped to [-clamp, +clamp] (None: not clamped), then
    filtered with ``fd`` and downsampled by ``down``. Returns ``[N, C, (H * up + x0 + x1 - kfu -
    kfd + 2) // down + 1, ...]`` (the paper's code's ``filtered_lrelu`` reference path)."""
    x = x + b.to(x.dtype).reshape(1, -1, 1, 1)
    x = upfirdn2d(x, fu, up=up, padding=padding, gain=up ** 2)
    if slope != 1:
        x = F.leaky_relu(x, slope)
    if gain != 1:
        x = x * gain
    if clamp is not None:
        x = x.clamp(-clamp, clamp)
    return upfirdn2d(x, fd, down=down)
