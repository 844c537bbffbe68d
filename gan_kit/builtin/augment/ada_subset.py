"""``[augment] name = "ada", pipeline = "gankit-subset"``: gankit's first ADA pipeline, kept as it
was (gankit 0.2's ``name = "ada"``): seven of the paper's transforms, each with its own exact
pixel operation instead of the reference's single resampling.

Karras et al. 2020, "Training Generative Adversarial Networks with Limited Data"
(arXiv:2006.06676), sec. 2.3 and appendix B. Each transform is applied to each sample with
probability p, in the paper's order (geometric, then colour):

- ``xflip``: a horizontal flip with probability 1/2 (identity otherwise), exact.
- ``rotate90``: k * 90 degrees, k uniform in {0, 1, 2, 3}, exact (square images only).
- ``translation``: integer shift of each axis by ``round(t * side)``, ``t ~ U(-r, r)``; what moves
  in is the image mirrored at its border (``translation_padding = "reflect"``) or wrapped around
  (``"wrap"``), exact.
- ``scale``: isotropic, ``2^N(0, scale_std)``, bilinear ``F.grid_sample`` with reflection padding
  (no anti-aliasing filters).
- ``brightness`` ``x + N(0, brightness_std)``; ``contrast`` ``x * 2^N(0, contrast_std)`` about 0;
  ``saturation`` ``m_c + (x - m_c) * 2^N(0, saturation_std)``, ``m_c`` the per-pixel channel mean
  (a no-op for grey images).

Every enabled transform draws its parameters whether or not it is applied, so the sequence of
draws does not depend on p; a sample a transform leaves alone keeps its pixels bit-exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gan_kit import GankitError, batch_rand, batch_randn
from gan_kit.builtin.augment import gather_rows_cols, per_sample

__all__ = ["ADA_TRANSFORMS", "SubsetPipeline"]

ADA_TRANSFORMS = ("xflip", "rotate90", "translation", "scale", "brightness", "contrast", "saturation")


def _reflect(index: torch.Tensor, size: int) -> torch.Tensor:
    """Mirror an index into [0, size) without repeating the edge pixel (``F.pad`` "reflect"),
    valid for indexes in (-size, 2 * size - 1)."""
    if size == 1:
        return torch.zeros_like(index)
    index = index.abs()
    return (size - 1) - ((size - 1) - index).abs()


class SubsetPipeline:
    """``pipeline(images[N,C,H,W], p) -> [N,C,H,W]`` (same dtype) with the transforms named in
    ``enabled`` (of ``ADA_TRANSFORMS``) and the ranges of ``options`` (``translate_ratio``,
    ``translation_padding``, ``scale_std``, ``brightness_std``, ``contrast_std``,
    ``saturation_std``); ``p`` a 0-dim tensor on the images' device. Raises ``GankitError`` on
    non-square images with ``rotate90``."""

    def __init__(self, enabled: frozenset[str], options):
        self.enabled = enabled
        self.o = options
        self.padding = options.translation_padding or "reflect"

    def __call__(self, images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        n, c, h, w = images.shape
        dev = images.device
        o, on = self.o, self.enabled
        applied = lambda: batch_rand(n, device=dev) < p  # noqa: E731
        if "xflip" in on:
            flip = applied() & (batch_rand(n, device=dev) < 0.5)
            images = torch.where(flip.view(-1, 1, 1, 1), images.flip(3), images)
        if "rotate90" in on:
            if h != w:
                raise GankitError(f"augment.transforms: 'rotate90' needs square images, got {h}x{w} "
                                  f"(remove rotate90 from augment.transforms)")
            k = torch.floor(batch_rand(n, device=dev) * 4).long()
            k = torch.where(applied(), k, torch.zeros_like(k))
            turns = torch.stack([torch.rot90(images, i, dims=(2, 3)) for i in range(4)], dim=1)
            images = turns[torch.arange(n, device=dev), k]
        if "translation" in on:
            images = self._translate(images, p)
        if "scale" in on:
            images = self._scale(images, p)
        if "brightness" in on:
            b = batch_randn(n, device=dev) * o.brightness_std
            b = torch.where(applied(), b, torch.zeros_like(b))
            images = images + per_sample(b, images)
        if "contrast" in on:
            cf = torch.exp2(batch_randn(n, device=dev) * o.contrast_std)
            cf = torch.where(applied(), cf, torch.ones_like(cf))
            images = images * per_sample(cf, images)
        if "saturation" in on:
            s = torch.exp2(batch_randn(n, device=dev) * o.saturation_std)
            hit = applied()
            if c > 1:  # one channel has no chroma: mean_c == x, nothing to scale
                mean_c = images.mean(dim=1, keepdim=True)
                saturated = mean_c + (images - mean_c) * per_sample(s, images)
                # mean_c + (x - mean_c) is not exactly x in floating point: keep the samples left
                # alone bit-exact.
                images = torch.where(hit.view(-1, 1, 1, 1), saturated, images)
        return images

    def _translate(self, images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        n, _, h, w = images.shape
        dev = images.device
        r = self.o.translate_ratio
        t = (batch_rand(n, 2, device=dev) * 2 - 1) * r
        hit = batch_rand(n, device=dev) < p
        ty = torch.where(hit, torch.round(t[:, 0] * h), torch.zeros(n, device=dev)).long().view(n, 1)
        tx = torch.where(hit, torch.round(t[:, 1] * w), torch.zeros(n, device=dev)).long().view(n, 1)
        rows = torch.arange(h, device=dev).view(1, -1) - ty
        cols = torch.arange(w, device=dev).view(1, -1) - tx
        if self.padding == "wrap":
            rows, cols = rows % h, cols % w
        else:
            rows, cols = _reflect(rows, h), _reflect(cols, w)
        return gather_rows_cols(images, rows, cols)

    def _scale(self, images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        n = images.shape[0]
        dev = images.device
        s = torch.exp2(batch_randn(n, device=dev) * self.o.scale_std)
        hit = batch_rand(n, device=dev) < p
        s = torch.where(hit, s, torch.ones_like(s))
        # Output pixel at normalised position u shows the input at u / s (content grows by s).
        theta = torch.zeros(n, 2, 3, device=dev)
        theta[:, 0, 0] = 1.0 / s
        theta[:, 1, 1] = 1.0 / s
        # Half precision resamples in float32 (CPU grid_sample lacks bf16 kernels, and the
        # weights want the precision); float32 / float64 stay as they are.
        work = images if images.dtype in (torch.float32, torch.float64) else images.float()
        grid = F.affine_grid(theta.to(work.dtype), list(images.shape), align_corners=False)
        scaled = F.grid_sample(work, grid, mode="bilinear", padding_mode="reflection",
                               align_corners=False).to(images.dtype)
        # Samples left alone keep their exact pixels (identity resampling rounds in float).
        return torch.where(hit.view(-1, 1, 1, 1), scaled, images)
