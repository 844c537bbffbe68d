"""Layers of StudioGAN's ResNet GANs (Kang et al., PyTorch-StudioGAN, ``src/utils/ops.py``):
spectral normalisation in the form its networks compute it, SAGAN's self-attention, and the
channel tables of its ResNet backbones.

* ``SpectralNorm``: the weight divided by its largest singular value (Miyato et al. 2018,
  "Spectral Normalization for GANs", sec. 2.1 and algorithm 1), estimated with one power
  iteration per training forward in the order of ``torch.nn.utils.spectral_norm`` (the hook form
  StudioGAN wraps every layer in, eps 1e-6): ``v = normalize(W^T u)``, ``u = normalize(W v)``,
  ``sigma = u^T W v``; in eval mode ``u`` and ``v`` are used as stored. A parametrization
  (``torch.nn.utils.parametrize``), so the layer stays a torch ``Conv2d`` / ``Linear`` /
  ``Embedding`` whose stored weight an initializer can reach.
* ``SelfAttention``: SAGAN's non-local block (Zhang et al. 2019, "Self-Attention GANs", sec. 3,
  eq. 1-3) as StudioGAN builds it: theta and phi 1x1 convolutions to C/8, g to C/2, phi and g
  max-pooled 2x2, the output convolution back to C, scaled by a learned ``gamma`` (0 at init).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

__all__ = ["SpectralNorm", "spectral_norm", "SelfAttention", "G_MULTIPLIERS", "D_MULTIPLIERS", "D_DOWNSAMPLE",
           "RESOLUTIONS", "STUDIOGAN_RESOLUTIONS", "SN_EPS"]

#: The eps of StudioGAN's spectral norm (``ops.snconv2d`` & co.): the normalisation's guard.
SN_EPS = 1e-6

#: G's channels per block boundary as multiples of ``g_conv_dim`` (4 px first): block i maps
#: ``m[i]`` to ``m[i + 1]`` channels (StudioGAN's ``g_in_dims_collection`` / ``g_out_dims_collection``).
G_MULTIPLIERS = {16: (4, 4, 4), 32: (4, 4, 4, 4), 64: (16, 8, 4, 2, 1), 128: (16, 16, 8, 4, 2, 1),
                 256: (16, 16, 8, 8, 4, 2, 1),
                 512: (16, 16, 8, 8, 4, 2, 1, 1)}
#: D's output channels per block as multiples of ``d_conv_dim`` (input side first; StudioGAN's
#: ``d_out_dims_collection``), and which blocks halve the resolution (``d_down``).
D_MULTIPLIERS = {16: (2, 2, 2), 32: (2, 2, 2, 2), 64: (1, 2, 4, 8, 16), 128: (1, 2, 4, 8, 16, 16),
                 256: (1, 2, 4, 8, 8, 16, 16),
                 512: (1, 1, 2, 4, 8, 8, 16, 16)}
D_DOWNSAMPLE = {16: (True, False, False), 32: (True, True, False, False), 64: (True,) * 4 + (False,),
                128: (True,) * 5 + (False,),
                256: (True,) * 6 + (False,), 512: (True,) * 7 + (False,)}
#: The image sizes the ResNet backbones are defined for: StudioGAN's 32 to 512 px, and 16 px, which
#: StudioGAN does not define: its 32 px networks with one block fewer (G's last, at 32 px; D's
#: first, 32 -> 16 px), so small images (the 8x8 digits) need not be upscaled to 32
#: (docs/architectures.md, choices that differ on purpose).
RESOLUTIONS = tuple(G_MULTIPLIERS)
#: The sizes of StudioGAN's own tables (its checkpoints come in these).
STUDIOGAN_RESOLUTIONS = (32, 64, 128, 256, 512)


class SpectralNorm(nn.Module):
    """Parametrization ``W -> W / sigma``, ``sigma = u^T W v`` with ``W`` the weight as a matrix
    ``[out, in * k * k]`` (dim 0 first, as for a conv, linear or embedding layer) and ``u[out]``,
    ``v[in * k * k]`` the buffers of the power iteration, drawn N(0, 1) and normalised. In training
    mode each forward first runs one iteration (``v = normalize(W^T u)``, ``u = normalize(W v)``,
    no gradient) and stores ``u`` and ``v``."""

    def __init__(self, weight: torch.Tensor, eps: float = SN_EPS):
        super().__init__()
        self.eps = float(eps)
        rows, cols = weight.shape[0], weight[0].numel()
        self.register_buffer("u", F.normalize(weight.new_empty(rows).normal_(0, 1), dim=0, eps=self.eps))
        self.register_buffer("v", F.normalize(weight.new_empty(cols).normal_(0, 1), dim=0, eps=self.eps))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        matrix = weight.flatten(1)
        if self.training:
            with torch.no_grad():
                v = F.normalize(torch.mv(matrix.t(), self.u), dim=0, eps=self.eps)
                u = F.normalize(torch.mv(matrix, v), dim=0, eps=self.eps)
                self.u.copy_(u)
                self.v.copy_(v)
        # copies: a later forward updates the buffers in place while this graph may still need them
        sigma = torch.dot(self.u.clone(), torch.mv(matrix, self.v.clone()))
        return weight / sigma


def spectral_norm(layer: nn.Module, enabled: bool = True) -> nn.Module:
    """``layer`` with its ``weight`` spectrally normalised (``SpectralNorm``) when ``enabled``;
    returns ``layer``. Registered ``unsafe`` so building runs no power iteration."""
    if enabled:
        parametrize.register_parametrization(layer, "weight", SpectralNorm(layer.weight.detach()), unsafe=True)
    return layer


class SelfAttention(nn.Module):
    """``x[N, C, H, W] -> x + gamma * out(g(x) attn^T)``, ``attn = softmax(theta(x)^T phi(x))``
    over the max-pooled positions (SAGAN, Zhang et al. 2019, sec. 3). ``C`` a multiple of 8,
    ``H`` and ``W`` even. ``sn``: spectral norm on the four 1x1 convolutions (bias-free)."""

    def __init__(self, channels: int, sn: bool):
        super().__init__()
        if channels % 8:
            raise ValueError(f"self-attention needs channels divisible by 8, got {channels}")

        def conv(cin: int, cout: int) -> nn.Conv2d:
            return spectral_norm(nn.Conv2d(cin, cout, 1, bias=False), sn)

        self.theta = conv(channels, channels // 8)
        self.phi = conv(channels, channels // 8)
        self.g = conv(channels, channels // 2)
        self.out = conv(channels // 2, channels)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        n, ch, h, w = x.shape
        theta = self.theta(x).view(n, ch // 8, h * w)
        phi = F.max_pool2d(self.phi(x), 2).view(n, ch // 8, h * w // 4)
        attn = torch.softmax(torch.bmm(theta.permute(0, 2, 1), phi), dim=-1)
        g = F.max_pool2d(self.g(x), 2).view(n, ch // 2, h * w // 4)
        out = self.out(torch.bmm(g, attn.permute(0, 2, 1)).view(n, ch // 2, h, w))
        return x + self.gamma * out
