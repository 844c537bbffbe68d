"""StyleGAN3's filtered leaky ReLU in plain PyTorch (Karras et al. 2021, arXiv:2106.12423, sec.
3.2, fig. 4b, appendix C): the nonlinearity of an alias-free layer applied at a higher sampling
rate - bias, upsample with a low-pass filter, leaky ReLU times a gain, clamp, low-pass filter and
downsample.

``upfirdn2d`` here takes a 1-D (separable: the taps along x, then along y) or 2-D filter, as the
paper's code's reference path. Other forms of the same sums, faster than inserting zeros and
filtering everything: a separable filter is, along each axis, one linear map of the row (or
column), so upsampling, padding, filtering and downsampling together are one matrix product per
axis with ``resampling_matrix`` (the inserted zeros and the dropped outputs never computed; dense
products of matrices of some 10-100 entries a side run far faster on CPUs than per-channel
convolutions). A 2-D filter: a transposed convolution with stride ``up`` (it skips the inserted
zeros), cut to the padded window, and a strided convolution for ``down``.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["upfirdn2d", "filtered_lrelu", "resampling_matrix"]


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
    if f is None or f.ndim == 1:
        f = torch.ones(1, dtype=torch.float32, device=x.device) if f is None else f
        mx = resampling_matrix(f, w, up=up, down=down, padding=(x0, x1), gain=gain ** 0.5).to(x.dtype)
        my = resampling_matrix(f, h, up=up, down=down, padding=(y0, y1), gain=gain ** 0.5).to(x.dtype)
        return my.t() @ (x @ mx)
    if up > 1:
        y = _upsample(x, f, up, (x0, x1, y0, y1), gain)
        return y[:, :, ::down, ::down] if down > 1 else y
    x = F.pad(x, (max(x0, 0), max(x1, 0), max(y0, 0), max(y1, 0)))
    x = x[:, :, max(-y0, 0):x.shape[2] - max(-y1, 0), max(-x0, 0):x.shape[3] - max(-x1, 0)]
    # A convolution, i.e. the flipped filter correlated (the low-pass filters are symmetric).
    f = (f * gain).flip([0, 1]).to(x.dtype)
    return F.conv2d(x, f.expand(c, 1, *f.shape), groups=c, stride=down)


def resampling_matrix(f: torch.Tensor, length: int, *, up: int = 1, down: int = 1,
                      padding: Sequence[int] = (0, 0), gain: float = 1.0) -> torch.Tensor:
    """The ``[length, out]`` matrix ``M`` with ``x @ M`` = ``x[..., length]`` upsampled by ``up``
    (``up - 1`` zeros after every entry), padded by ``padding = [p0, p1]`` (negative: cropped),
    convolved with the taps ``f[k]`` times ``gain`` (outputs whose footprint lies inside only)
    and every ``down``-th kept: ``out = (length * up + p0 + p1 - k) // down + 1``. Output ``j``
    is convolution output ``q = j down``, ``sum_t zpad[q + t] f[k - 1 - t]``; input ``i`` sits at
    ``zpad[i up + p0]``, so ``M[i, j] = gain f[k - 1 - t]`` with ``t = i up + p0 - j down`` where
    ``0 <= t < k``, else 0."""
    k = f.shape[0]
    p0, p1 = (int(v) for v in padding)
    out = (length * up + p0 + p1 - k) // down + 1
    i = torch.arange(length, device=f.device).unsqueeze(1)
    j = torch.arange(out, device=f.device).unsqueeze(0)
    t = i * up + p0 - j * down
    taps = (f * gain).flip(0)[t.clamp(0, k - 1)]
    return torch.where((t >= 0) & (t < k), taps, torch.zeros_like(taps))


def _window(y: torch.Tensor, dim: int, start: int, length: int) -> torch.Tensor:
    """``y``'s ``length`` entries along ``dim`` (-1 or -2) from ``start``, zeros outside it."""
    size = y.shape[dim]
    lo, hi = max(-start, 0), max(start + length - size, 0)
    y = y.narrow(dim, max(start, 0), min(start + length, size) - max(start, 0))
    if lo or hi:
        y = F.pad(y, (lo, hi) if dim == -1 else (0, 0, lo, hi))
    return y


def _upsample(x: torch.Tensor, f: torch.Tensor, up: int, padding: tuple[int, int, int, int],
              gain: float) -> torch.Tensor:
    """``upfirdn2d(x, f, up, padding, gain)`` for a 2-D ``f`` with ``down = 1``, by a transposed
    convolution.

    Zero insertion, padding ``p0`` and the convolution with ``f`` (``k`` taps) give output ``j``
    ``= sum_i x[i] f[j - p0 + k - 1 - i up]``; a transposed convolution with stride ``up`` and
    the unflipped ``f`` gives ``t[q] = sum_i x[i] f[q - i up]``, so the output is ``t`` from
    ``k - 1 - p0`` on (zeros beyond it), ``len * up + p0 + p1 - k + 1`` long."""
    n, c, h, w = x.shape
    x0, x1, y0, y1 = padding
    k = f.shape[-1]
    f = (f * gain).to(x.dtype)
    t = F.conv_transpose2d(x, f.expand(c, 1, k, k), stride=up, groups=c)
    t = _window(t, -1, k - 1 - x0, w * up + x0 + x1 - k + 1)
    return _window(t, -2, k - 1 - y0, h * up + y0 + y1 - k + 1)


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
