"""FIR up/downsampling of StyleGAN2 in plain PyTorch: ``upfirdn2d`` and the resampling
convolutions built on it (Karras et al. 2020, arXiv:1912.04958, which resamples with the
separable [1, 3, 3, 1] low-pass filter as StyleGAN did, Karras et al. 2019, sec. 2 / Zhang 2019,
"Making Convolutional Networks Shift-Invariant Again"; stylegan2-ada-pytorch's
``torch_utils/ops/upfirdn2d.py`` and ``conv2d_resample.py`` define the operations, written again
here from their definitions).

``upfirdn2d(x, f, up, down, padding)``, per channel: insert ``up - 1`` zeros after every pixel,
pad with zeros (negative padding crops), convolve with the 2-D FIR filter ``f`` keeping only
outputs whose footprint lies inside the padded image, keep every ``down``-th pixel. The
resampling convolutions pad once, at the start, exactly as the reference does, so a border pixel
sees the filter of the zero-extended signal (not of a zero-padded intermediate image).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["RESAMPLE_FILTER", "setup_filter", "upfirdn2d", "upsample2d", "downsample2d", "conv2d_resample"]

#: The binomial low-pass filter of StyleGAN / StyleGAN2 (separable, one dimension).
RESAMPLE_FILTER = (1, 3, 3, 1)


def setup_filter(taps: Sequence[float] = RESAMPLE_FILTER) -> torch.Tensor:
    """The 2-D filter ``[k, k]`` (float32) of 1-D ``taps``: their outer product, normalised to sum
    1 so a constant image keeps its value. Raises ValueError for an empty list."""
    t = torch.as_tensor(list(taps), dtype=torch.float32)
    if t.ndim != 1 or t.numel() == 0:
        raise ValueError(f"setup_filter: taps must be a non-empty list of numbers, got {taps!r}")
    f = torch.outer(t, t)
    return f / f.sum()


def _pad4(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    if isinstance(padding, int):
        return padding, padding, padding, padding
    p = tuple(int(v) for v in padding)
    if len(p) == 2:
        return p[0], p[0], p[1], p[1]
    if len(p) != 4:
        raise ValueError(f"padding must be an int, [x, y] or [x0, x1, y0, y1], got {padding!r}")
    return p  # type: ignore[return-value]


def upfirdn2d(x: torch.Tensor, f: torch.Tensor, *, up: int = 1, down: int = 1,
              padding: int | Sequence[int] = 0, gain: float = 1.0) -> torch.Tensor:
    """Upsample, pad, FIR-filter and downsample every channel of ``x[N, C, H, W]``.

    ``f[kh, kw]``: the filter, applied as a convolution (flipped, then correlated; the binomial
    filters are symmetric so the flip changes nothing for them) and multiplied by ``gain``.
    ``padding``: ``[x0, x1, y0, y1]`` zeros (negative: cropped) around the upsampled image.
    Returns ``[N, C, (H * up + y0 + y1 - kh) // down + 1, (W * up + x0 + x1 - kw) // down + 1]``
    in ``x``'s dtype. Same definition as stylegan2-ada-pytorch's ``upfirdn2d``.
    """
    n, c, h, w = x.shape
    x0, x1, y0, y1 = _pad4(padding)
    if up > 1:  # zero insertion: each pixel followed by up - 1 zeros, in both directions
        x = F.pad(x.reshape(n, c, h, 1, w, 1), (0, up - 1, 0, 0, 0, up - 1)).reshape(n, c, h * up, w * up)
    x = F.pad(x, (max(x0, 0), max(x1, 0), max(y0, 0), max(y1, 0)))
    x = x[:, :, max(-y0, 0):x.shape[2] - max(-y1, 0), max(-x0, 0):x.shape[3] - max(-x1, 0)]
    kernel = (f * gain).flip(0, 1).to(x.dtype)
    x = F.conv2d(x, kernel.expand(c, 1, *f.shape), groups=c)
    return x[:, :, ::down, ::down] if down > 1 else x


def upsample2d(x: torch.Tensor, f: torch.Tensor, up: int = 2) -> torch.Tensor:
    """``[N, C, H, W] -> [N, C, H * up, W * up]``: zero insertion and the FIR filter with gain
    ``up ** 2`` (so a constant image stays constant), padded so the output is aligned on the
    input's pixel grid (stylegan2-ada-pytorch ``upsample2d``). Used for G's skip outputs."""
    kw = f.shape[-1]
    p0, p1 = (kw + up - 1) // 2, (kw - up) // 2
    return upfirdn2d(x, f, up=up, padding=(p0, p1, p0, p1), gain=up * up)


def downsample2d(x: torch.Tensor, f: torch.Tensor, down: int = 2) -> torch.Tensor:
    """``[N, C, H, W] -> [N, C, H / down, W / down]``: the FIR filter, then every ``down``-th
    pixel (stylegan2-ada-pytorch ``downsample2d``)."""
    kw = f.shape[-1]
    p0, p1 = (kw - down + 1) // 2, (kw - down) // 2
    return upfirdn2d(x, f, down=down, padding=(p0, p1, p0, p1))


def conv2d_resample(x: torch.Tensor, weight: torch.Tensor, f: torch.Tensor, *, up: int = 1, down: int = 1,
                    groups: int = 1) -> torch.Tensor:
    """A "same" convolution (``F.conv2d`` semantics, i.e. correlation with ``weight[Cout,
    Cin / groups, k, k]``, padding k // 2) with FIR upsampling (``up = 2``) before it or FIR
    downsampling (``down = 2``) after it, padded once at the start as stylegan2-ada-pytorch's
    ``conv2d_resample`` is:

    * ``up = 2``: ``conv2d(upfirdn2d(x, f, up=2, padding=k//2 + [(kf+1)//2, (kf-2)//2], gain=4),
      weight)`` without further padding, ``[N, Cin, H, W] -> [N, Cout, 2H, 2W]``. Computed as a
      stride-2 transposed convolution on the low-resolution input followed by the filter (both
      are linear and shift-invariant, so they commute): a quarter of the multiply-adds of
      convolving the upsampled image.
    * ``down = 2``: ``conv2d(upfirdn2d(x, f, padding=k//2 + [(kf-1)//2, (kf-2)//2]), weight,
      stride=2)``, ``[N, Cin, H, W] -> [N, Cout, H/2, W/2]``; a 1x1 kernel downsamples first
      (``downsample2d``) and then convolves, the same thing.
    """
    k = weight.shape[-1]
    kf = f.shape[-1]
    p = k // 2
    weight = weight.to(x.dtype)
    if up == 1 and down == 1:
        return F.conv2d(x, weight, padding=p, groups=groups)
    if up > 1:
        if down != 1:
            raise ValueError("conv2d_resample: up and down together are not supported")
        # The transposed convolution scatters each input pixel with the kernel, i.e. convolves
        # the zero-inserted image with it: flipping the kernel makes that the correlation
        # conv2d computes. Its output starts k - 1 pixels before the reference's, which the
        # filter's padding below accounts for.
        cout, cin_g = weight.shape[0], weight.shape[1]
        wt = weight.flip(2, 3).reshape(groups, cout // groups, cin_g, k, k).transpose(1, 2)
        wt = wt.reshape(groups * cin_g, cout // groups, k, k)
        x = F.conv_transpose2d(x, wt, stride=up, groups=groups)
        p0 = p + (kf + up - 1) // 2 - (k - 1)
        p1 = p + (kf - up) // 2 - (k - up)
        return upfirdn2d(x, f, padding=(p0, p1, p0, p1), gain=up * up)
    if k == 1:
        return F.conv2d(downsample2d(x, f, down), weight, groups=groups)
    p0 = p + (kf - down + 1) // 2
    p1 = p + (kf - down) // 2
    return F.conv2d(upfirdn2d(x, f, padding=(p0, p1, p0, p1)), weight, stride=down, groups=groups)
