"""StyleGAN3's synthesis input (Karras et al. 2021, arXiv:2106.12423, sec. 3.1, appendix F.1):
Fourier features of frequencies drawn in a disc, rotated and translated by an affine
transformation of the first W, and by a user ``transform`` (how gen_video.py and visualizer.py
translate and rotate the output)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gan_kit.builtin.architectures.stylegan2.layers import EqualizedLinear

__all__ = ["SynthesisInput", "user_transform"]


def user_transform(translate: tuple[float, float] = (0.0, 0.0), rotate: float = 0.0) -> torch.Tensor:
    """The ``[3, 3]`` float32 matrix to set as ``SynthesisInput.transform`` so G's output is rotated
    by ``rotate`` degrees and translated by ``translate`` (x, y, in image widths: the input's
    coordinates span the image as [-0.5, 0.5]), as the paper's gen_images.py: the inverse of ``[[cos, sin, tx], [-sin, cos, ty], [0,
    0, 1]]``, computed in float64)."""
    a = math.radians(rotate)
    c, s = math.cos(a), math.sin(a)
    m = torch.tensor([[c, s, translate[0]], [-s, c, translate[1]], [0.0, 0.0, 1.0]], dtype=torch.float64)
    return torch.linalg.inv(m).float()


class SynthesisInput(nn.Module):
    """``w[N, w_dim] -> x[N, channels, size, size]``: ``channels`` Fourier features sampled at
    ``sampling_rate`` on a ``size`` x ``size`` grid centred on the image, then mixed by a learned
    ``[channels, channels]`` matrix (divided by sqrt(channels)).

    Buffers: ``freqs[channels, 2]`` (drawn uniformly in the disc of radius ``bandwidth``: the
    paper's code's draw, a Gaussian direction scaled by ``1 / (r * exp(r^2) ** 0.25)``),
    ``phases[channels]`` (uniform in [-0.5, 0.5)), and ``transform[3, 3]``: the user's *inverse*
    transform of the output image (identity by default; gen_images.py sets the inverse of the
    rotation-and-translation matrix). The affine layer maps W to ``(r_c, r_s, t_x, t_y)``
    (initialised to ``(1, 0, 0, 0)``); ``(r_c, r_s)`` normalised gives a rotation, ``(t_x, t_y)``
    (scaled by the same norm) a translation. Frequencies become ``freqs @ T[:2, :2]`` and phases
    ``phases + freqs @ T[:2, 2]`` with ``T = R(w) @ Tr(w) @ transform``; each feature is damped by
    ``clamp(1 - (|f| - bandwidth) / (sampling_rate / 2 - bandwidth), 0, 1)`` so the transform
    cannot bring frequencies above the sampling rate's limit."""

    def __init__(self, w_dim: int, channels: int, size: int, sampling_rate: float, bandwidth: float):
        super().__init__()
        self.channels, self.size = channels, size
        self.sampling_rate, self.bandwidth = float(sampling_rate), float(bandwidth)
        freqs = torch.randn(channels, 2)
        radii = freqs.square().sum(dim=1, keepdim=True).sqrt()
        freqs = freqs / (radii * radii.square().exp().pow(0.25)) * bandwidth
        phases = torch.rand(channels) - 0.5
        self.weight = nn.Parameter(torch.randn(channels, channels))
        self.affine = EqualizedLinear(w_dim, 4)
        with torch.no_grad():
            self.affine.weight.zero_()
            self.affine.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))
        self.register_buffer("transform", torch.eye(3))
        self.register_buffer("freqs", freqs)
        self.register_buffer("phases", phases)

    def forward(self, w: torch.Tensor, transform: torch.Tensor | None = None) -> torch.Tensor:
        """``transform[3, 3]``: used in place of the ``transform`` buffer (None: the buffer), so an
        exported graph can take it as an input."""
        n = w.shape[0]
        t = self.affine(w)
        t = t / t[:, :2].norm(dim=1, keepdim=True)
        c, s, tx, ty = t.unbind(dim=1)
        zero, one = torch.zeros_like(c), torch.ones_like(c)
        # The inverse rotation and translation of the image, applied before the user's transform.
        m_r = torch.stack([c, -s, zero, s, c, zero, zero, zero, one], dim=1).reshape(n, 3, 3)
        m_t = torch.stack([one, zero, -tx, zero, one, -ty, zero, zero, one], dim=1).reshape(n, 3, 3)
        transforms = m_r @ m_t @ (self.transform if transform is None else transform).to(t.dtype).unsqueeze(0)
        freqs = self.freqs.unsqueeze(0)
        phases = self.phases.unsqueeze(0) + (freqs @ transforms[:, :2, 2:]).squeeze(2)
        freqs = freqs @ transforms[:, :2, :2]
        amplitudes = (1 - (freqs.norm(dim=2) - self.bandwidth) / (self.sampling_rate / 2 - self.bandwidth)).clamp(0, 1)
        theta = torch.eye(2, 3, device=w.device)
        theta[0, 0] = theta[1, 1] = 0.5 * self.size / self.sampling_rate
        grid = F.affine_grid(theta.unsqueeze(0), [1, 1, self.size, self.size], align_corners=False)
        # [N, H, W, channels]: each pixel's position dotted with each (transformed) frequency.
        x = (grid.unsqueeze(3) @ freqs.permute(0, 2, 1).unsqueeze(1).unsqueeze(2)).squeeze(3)
        x = torch.sin((x + phases.unsqueeze(1).unsqueeze(2)) * (2 * math.pi))
        x = x * amplitudes.unsqueeze(1).unsqueeze(2)
        x = x @ (self.weight / math.sqrt(self.channels)).t()
        return x.permute(0, 3, 1, 2)
