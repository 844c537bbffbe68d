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
zeros), cut to the padded window, and a strided convolution for ``down``. ``filtered_lrelu``
also moves the leaky ReLU's gain into the downsampling (a product's factor, not a pass over the
upsampled maps) and skips the clamp where a bound shows it changes nothing.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["upfirdn2d", "filtered_lrelu", "resampling_matrix", "lrelu_matrices"]


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
    if any((x0, x1, y0, y1)):  # (F.pad copies even when it pads nothing)
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


def lrelu_matrices(fu: torch.Tensor | None, fd: torch.Tensor | None, size: Sequence[int], *, up: int, down: int,
                   padding: Sequence[int], gain: float = 1.0) -> tuple[torch.Tensor | None, ...] | None:
    """The resampling matrices of ``filtered_lrelu`` for an input of ``size = [H, W]``: ``(ux, uy,
    dx, dy)`` with ``ux[W, Wt]``, ``uy[H, Ht]`` (``fu`` upsampling by ``up`` with the padding,
    gain ``up`` each) and ``dx[Wt, Wout]``, ``dy[Ht, Hout]`` (``fd`` and downsampling by
    ``down``, ``dy`` times ``gain``: the leaky ReLU's gain, moved after the nonlinearity; both
    None for a 2-D ``fd``, which a convolution applies). None for a 2-D ``fu``. A layer computes
    them once (its input size is fixed), so no forward rebuilds them."""
    if fu is not None and fu.ndim != 1:
        return None
    h, w = (int(v) for v in size)
    x0, x1, y0, y1 = (int(v) for v in padding)
    ux = resampling_matrix(_taps(fu, fd), w, up=up, padding=(x0, x1), gain=float(up))
    uy = resampling_matrix(_taps(fu, fd), h, up=up, padding=(y0, y1), gain=float(up))
    if fd is not None and fd.ndim != 1:
        return ux, uy, None, None
    dx = resampling_matrix(_taps(fd, fu), ux.shape[1], down=down)
    dy = resampling_matrix(_taps(fd, fu), uy.shape[1], down=down, gain=gain)
    return ux, uy, dx, dy


def _taps(f: torch.Tensor | None, other: torch.Tensor | None) -> torch.Tensor:
    """``f``, or the 1-tap identity filter for None (on ``other``'s device)."""
    if f is not None:
        return f
    return torch.ones(1, dtype=torch.float32, device=None if other is None else other.device)


def _operator_bound(m: torch.Tensor) -> float:
    """The largest ``|x @ m|`` entry for ``|x| <= 1``: the largest column sum of ``|m|``."""
    return float(m.abs().sum(dim=0).amax())


def _clamp_binds(x: torch.Tensor, matrices: tuple[torch.Tensor, ...], slope: float, limit: float) -> bool:
    """False when no entry of the upsampled, leaky-ReLU'd ``x`` can exceed ``limit``: the bound
    ``max|x| * ||ux|| * ||uy|| * max(1, |slope|)`` (with slack for rounding) is below it, so the
    clamp would return its input and is skipped (with its backward), an exact shortcut. Only on
    the CPU in eager mode (reading the maximum back is a device sync; a trace must keep the
    clamp)."""
    if x.device.type != "cpu" or torch.jit.is_tracing() or torch.compiler.is_compiling():
        return True
    ux, uy = matrices[0], matrices[1]
    lo, hi = torch.aminmax(x.detach())
    bound = max(-float(lo), float(hi)) * _operator_bound(ux) * _operator_bound(uy) * max(1.0, abs(slope))
    return not bound * (1 + 1e-4) < limit


def filtered_lrelu(x: torch.Tensor, fu: torch.Tensor | None, fd: torch.Tensor | None, b: torch.Tensor, *,
                   up: int, down: int, padding: Sequence[int], gain: float, slope: float,
                   clamp: float | None, matrices: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
    """``x[N, C, H, W]`` plus the bias ``b[C]``, upsampled by ``up`` with ``fu`` (gain ``up ** 2``
    keeps a constant image's value) and padded by ``padding = [x0, x1, y0, y1]``, then leaky ReLU
    (``slope``; 1 = linear) times ``gain``, clamped to [-clamp, +clamp] (None: not clamped), then
    filtered with ``fd`` and downsampled by ``down``. Returns ``[N, C, (H * up + x0 + x1 - kfu -
    kfd + 2) // down + 1, ...]`` (the paper's code's ``filtered_lrelu`` reference path).

    ``matrices``: ``lrelu_matrices(fu, fd, [H, W], up=up, down=down, padding=padding, gain=gain)``
    when the caller keeps them (a layer does); None computes them. Computed as: separable filters
    as one matrix product per axis and direction; the gain applied after the filtering (it
    commutes with the clamp scaled by 1 / gain); the clamp skipped where it provably changes
    nothing (``_clamp_binds``)."""
    x = x + b.to(x.dtype).reshape(1, -1, 1, 1)
    if matrices is None:
        matrices = lrelu_matrices(fu, fd, x.shape[2:], up=up, down=down, padding=padding, gain=gain)
    limit = None if clamp is None else clamp / gain
    if matrices is None:  # a 2-D up filter: the general path
        x = upfirdn2d(x, fu, up=up, padding=padding, gain=up ** 2)
        x = _lrelu_clamp(x, slope, limit)
        return upfirdn2d(x, fd, down=down, gain=gain)
    if limit is not None and not _clamp_binds(x, matrices, slope, limit):
        limit = None
    ux, uy, dx, dy = (None if m is None else m.to(x.dtype) for m in matrices)
    y = uy.t() @ (x @ ux)
    y = _lrelu_clamp(y, slope, limit)
    if dx is None:
        return upfirdn2d(y, fd, down=down, gain=gain)
    return dy.t() @ (y @ dx)


def _lrelu_clamp(y: torch.Tensor, slope: float, limit: float | None) -> torch.Tensor:
    """Leaky ReLU of ``y`` (a fresh product nothing else holds: in place where autograd allows it,
    a positive slope) clamped to [-limit, limit] (None: not clamped)."""
    if slope != 1:
        y = F.leaky_relu_(y, slope) if slope > 0 else F.leaky_relu(y, slope)
    return y if limit is None else y.clamp(-limit, limit)
