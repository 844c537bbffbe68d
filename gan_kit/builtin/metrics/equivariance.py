"""The equivariance metrics of StyleGAN3 (Karras et al. 2021, "Alias-Free Generative Adversarial
Networks", arXiv:2106.12423, sec. 3 and appendix E): EQ-T (``eqt50k_int``), EQ-T frac
(``eqt50k_frac``) and EQ-R (``eqr50k``), the PSNR in dB between G's image drawn with a transformed
input and G's untransformed image transformed the same way afterwards, over the pixels both
define. Higher is more equivariant.

Per batch of ``batch_size`` latents (z ~ N(0, I), psi 1): the reference image with the identity
transform, then

* EQ-T: a translation t uniform in ``[-translate_max, translate_max]^2`` image widths, rounded to
  whole pixels; the reference shifted by whole pixels (zeros in the uncovered band, masked out);
* EQ-T frac: t not rounded; the reference resampled with a separable Lanczos-3 windowed sinc,
  masked where the filter reaches past the image;
* EQ-R: an angle uniform in ``[-rotate_max, rotate_max] * pi``; the reference rotated by a
  band-limited resampling (4x upsampled with the convolution of two oriented windowed sinc
  filters, then bilinear), and G's rotated image passed through the same band limit unrotated
  (a "pseudo-rotation" by the filter of the reverse angle), both masked.

PSNR = 20 log10(2) - 10 log10(MSE), the MSE summed over every masked pixel of every batch in
float64 (the images span [-1, 1]: peak-to-peak 2). The draws (z, then the transform, per batch)
come from one ``torch.Generator`` seeded with the metric's seed, in the order of the paper's
code, so the same seed given to ``torch.manual_seed`` there draws the same latents and transforms
on the CPU.

The transform is G's synthesis input ``transform`` buffer (``synthesis_network.input.transform``:
gankit's stylegan3); a G without one is refused in one line.
"""

from __future__ import annotations

import copy
import math
from typing import Callable, ClassVar, Literal

import attrs
import torch
import torch.nn.functional as F

from gan_kit import GankitError, hookimpl, option
from gan_kit.builtin.architectures.stylegan3 import upfirdn2d
from gan_kit.builtin.metrics import FromOptions

__all__ = ["equivariance_psnr", "input_transform", "EquivarianceMetric", "EQT", "EQTFrac", "EQR", "Kind"]

Kind = Literal["eqt_int", "eqt_frac", "eqr"]


def _sinc(x: torch.Tensor) -> torch.Tensor:
    y = (x * math.pi).abs()
    z = torch.sin(y) / y.clamp(1e-30, float("inf"))
    return torch.where(y < 1e-30, torch.ones_like(x), z)


def _lanczos_window(x: torch.Tensor, a: float) -> torch.Tensor:
    x = x.abs() / a
    return torch.where(x < 1, _sinc(x), torch.zeros_like(x))


def _rotation(angle: torch.Tensor) -> torch.Tensor:
    """``[3, 3]`` float32: ``[[cos, sin, 0], [-sin, cos, 0], [0, 0, 1]]``."""
    angle = torch.as_tensor(angle).to(torch.float32)
    m = torch.eye(3, device=angle.device)
    m[0, 0], m[0, 1], m[1, 0], m[1, 1] = angle.cos(), angle.sin(), -angle.sin(), angle.cos()
    return m


def _filter2d(x: torch.Tensor, f: torch.Tensor, padding=(0, 0, 0, 0)) -> torch.Tensor:
    """Filter with the 2-D ``f[fh, fw]`` centred (output the input's size plus ``padding``)."""
    fh, fw = f.shape
    x0, x1, y0, y1 = padding
    return upfirdn2d(x, f, padding=(x0 + fw // 2, x1 + (fw - 1) // 2, y0 + fh // 2, y1 + (fh - 1) // 2))


def _upsample2d(x: torch.Tensor, f: torch.Tensor, up: int, padding: int) -> torch.Tensor:
    """Upsample ``up`` times with the 2-D ``f`` (gain up^2), ``padding`` more pixels each side."""
    fh, fw = f.shape
    p = (padding + (fw + up - 1) // 2, padding + (fw - up) // 2, padding + (fh + up - 1) // 2, padding + (fh - up) // 2)
    return upfirdn2d(x, f, up=up, padding=p, gain=up * up)


def integer_translation(x: torch.Tensor, tx: torch.Tensor, ty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(image, mask)``: ``x[N, C, H, W]`` shifted by ``(tx * W, ty * H)`` rounded to pixels,
    zeros (mask 0) where nothing shifted in."""
    _, _, h, w = x.shape
    ix = int(torch.as_tensor(tx * w).to(torch.float32).round())
    iy = int(torch.as_tensor(ty * h).to(torch.float32).round())
    z, m = torch.zeros_like(x), torch.zeros_like(x)
    if abs(ix) < w and abs(iy) < h:
        z[:, :, max(iy, 0):h + min(iy, 0), max(ix, 0):w + min(ix, 0)] = \
            x[:, :, max(-iy, 0):h + min(-iy, 0), max(-ix, 0):w + min(-ix, 0)]
        m[:, :, max(iy, 0):h + min(iy, 0), max(ix, 0):w + min(ix, 0)] = 1
    return z, m


def fractional_translation(x: torch.Tensor, tx: torch.Tensor, ty: torch.Tensor,
                           a: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(image, mask)``: ``x`` shifted by ``(tx * W, ty * H)`` pixels with the separable
    Lanczos-``a`` windowed sinc (normalised to sum 1); mask 1 where the filter stayed inside."""
    _, _, h, w = x.shape
    tx = torch.as_tensor(tx * w).to(dtype=torch.float32, device=x.device)
    ty = torch.as_tensor(ty * h).to(dtype=torch.float32, device=x.device)
    ix, iy = int(tx.floor()), int(ty.floor())
    fx, fy = tx - ix, ty - iy
    b = a - 1
    z = torch.zeros_like(x)
    zx0, zy0 = max(ix - b, 0), max(iy - b, 0)
    zx1, zy1 = min(ix + a, 0) + w, min(iy + a, 0) + h
    if zx0 < zx1 and zy0 < zy1:
        taps = torch.arange(a * 2, device=x.device) - b
        kx = (_sinc(taps - fx) * _sinc((taps - fx) / a)).unsqueeze(0)
        ky = (_sinc(taps - fy) * _sinc((taps - fy) / a)).unsqueeze(1)
        y = _filter2d(x, kx / kx.sum(), padding=(b, a, 0, 0))
        y = _filter2d(y, ky / ky.sum(), padding=(0, 0, b, a))
        z[:, :, zy0:zy1, zx0:zx1] = y[:, :, max(b - iy, 0):h + b + a + min(-iy - a, 0),
                                      max(b - ix, 0):w + b + a + min(-ix - a, 0)]
    m = torch.zeros_like(x)
    mx0, my0 = max(ix + a, 0), max(iy + a, 0)
    mx1, my1 = min(ix - b, 0) + w, min(iy - b, 0) + h
    if mx0 < mx1 and my0 < my1:
        m[:, :, my0:my1, mx0:mx1] = 1
    return z, m


def affine_bandlimit_filter(mat: torch.Tensor, a: int = 3, amax: int = 16, aflt: int = 64, up: int = 4,
                            cutoff_in: float = 1.0, cutoff_out: float = 1.0) -> torch.Tensor:
    """The 2-D filter ``[amax * 2 * up - 1]^2`` that band-limits an image both in its own
    coordinates and in those mapped by ``mat[:2, :2]``: the convolution of two sinc filters (one
    oriented by ``mat``), windowed by the convolution of the two Lanczos-``a`` windows, on a grid
    ``up`` times finer than the pixels (``aflt`` pixels each side, circular FFT convolution),
    cropped to ``amax`` pixels each side and normalised so each of the ``up^2`` phases sums to
    ``1 / up^2``."""
    if not a <= amax < aflt:
        raise ValueError(f"affine_bandlimit_filter: need a <= amax < aflt, got {a}, {amax}, {aflt}")
    mat = torch.as_tensor(mat).to(torch.float32)
    taps = ((torch.arange(aflt * up * 2 - 1, device=mat.device) + 1) / up - aflt).roll(1 - aflt * up)
    yi, xi = torch.meshgrid(taps, taps, indexing="ij")
    xo, yo = (torch.stack([xi, yi], dim=2) @ mat[:2, :2].t()).unbind(2)
    fi = _sinc(xi * cutoff_in) * _sinc(yi * cutoff_in)
    fo = _sinc(xo * cutoff_out) * _sinc(yo * cutoff_out)
    f = torch.fft.ifftn(torch.fft.fftn(fi) * torch.fft.fftn(fo)).real
    wi = _lanczos_window(xi, a) * _lanczos_window(yi, a)
    wo = _lanczos_window(xo, a) * _lanczos_window(yo, a)
    f = f * torch.fft.ifftn(torch.fft.fftn(wi) * torch.fft.fftn(wo)).real
    c = (aflt - amax) * up
    f = f.roll([aflt * up - 1] * 2, dims=[0, 1])[c:-c, c:-c]
    f = F.pad(f, [0, 1, 0, 1]).reshape(amax * 2, up, amax * 2, up)
    f = f / f.sum([0, 2], keepdim=True) / (up ** 2)
    return f.reshape(amax * 2 * up, amax * 2 * up)[:-1, :-1]


def affine_transformation(x: torch.Tensor, mat: torch.Tensor, up: int = 4, **filter_kwargs
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(image, mask)``: ``x`` mapped by ``mat`` (``[3, 3]``, in image coordinates [-1, 1]):
    upsampled ``up`` times through ``affine_bandlimit_filter``, then bilinear sampling; mask 1
    where the sample's footprint lies inside the image (nearest sampling of the inner region)."""
    _, _, h, w = x.shape
    mat = torch.as_tensor(mat).to(dtype=torch.float32, device=x.device)
    f = affine_bandlimit_filter(mat, up=up, **filter_kwargs)
    p = f.shape[0] // 2
    theta = mat.inverse()
    theta[:2, 2] *= 2
    theta[0, 2] += 1 / up / w
    theta[1, 2] += 1 / up / h
    theta[0, :] *= w / (w + p / up * 2)
    theta[1, :] *= h / (h + p / up * 2)
    theta = theta[:2, :3].unsqueeze(0).repeat([x.shape[0], 1, 1])
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    y = _upsample2d(x, f, up, p)
    z = F.grid_sample(y, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    m = torch.zeros_like(y)
    c = p * 2 + 1
    m[:, :, c:-c, c:-c] = 1
    m = F.grid_sample(m, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return z, m


def fractional_rotation(x: torch.Tensor, angle: torch.Tensor, a: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(image, mask)``: ``x`` rotated by ``angle`` radians, band-limited (``amax = 2 a``)."""
    angle = torch.as_tensor(angle).to(dtype=torch.float32, device=x.device)
    return affine_transformation(x, _rotation(angle), a=a, amax=a * 2)


def fractional_pseudo_rotation(x: torch.Tensor, angle: torch.Tensor, a: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(image, mask)``: ``x`` filtered (not resampled) by the band limit of a rotation by
    ``-angle``, so an image rotated by G is compared at the band limit of the rotated reference."""
    angle = torch.as_tensor(angle).to(dtype=torch.float32, device=x.device)
    f = affine_bandlimit_filter(_rotation(-angle), a=a, amax=a * 2, up=1)
    y = _filter2d(x, f)
    m = torch.zeros_like(y)
    c = f.shape[0] // 2
    m[:, :, c:-c, c:-c] = 1
    return y, m


def input_transform(G: torch.nn.Module) -> torch.Tensor | None:
    """G's synthesis-input ``transform`` buffer (``[3, 3]``), None for a G without one."""
    t = getattr(getattr(getattr(G, "synthesis_network", None), "input", None), "transform", None)
    return t if isinstance(t, torch.Tensor) and tuple(t.shape) == (3, 3) else None


def equivariance_psnr(G: torch.nn.Module, kind: Kind, num_samples: int, *, generator: torch.Generator,
                      labels: Callable[[int], torch.Tensor | None] = lambda n: None, batch_size: int = 4,
                      translate_max: float = 0.125, rotate_max: float = 1.0,
                      device: torch.device | str = "cpu") -> float:
    """The PSNR in dB of ``kind`` ("eqt_int", "eqt_frac", "eqr") for ``G`` (a stylegan3 G; a
    copy is drawn from, in eval mode, float32) over ``num_samples`` latents in batches of
    ``batch_size`` (the last batch whole, as the paper's code). ``generator`` (on the CPU) draws
    per batch z ``[batch_size, latent_dim]`` then the transform; ``labels(n)``: a conditional G's
    classes per batch (``labels[n]`` int64). GankitError for a G without an input transform."""
    if input_transform(G) is None:
        raise GankitError(f"{kind}: {type(G).__name__} has no synthesis-input transform "
                          f"(synthesis_network.input.transform); the equivariance metrics need a stylegan3 G")
    G = copy.deepcopy(G).eval().requires_grad_(False).to(device)
    M = input_transform(G)
    eye = torch.eye(3, device=device)
    res = G.resolution
    sums = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(0, num_samples, batch_size):
            z = torch.randn([batch_size, G.latent_dim], generator=generator).to(device)
            c = labels(batch_size)
            ws = G.mapping(z, c.to(device) if c is not None else None)
            M.copy_(eye)
            orig = G.synthesis(ws)
            if kind in ("eqt_int", "eqt_frac"):
                t = (torch.rand(2, generator=generator) * 2 - 1) * translate_max
                if kind == "eqt_int":
                    t = (t * res).round() / res
                M.copy_(eye)
                M[:2, 2] = -t.to(device)
                img = G.synthesis(ws)
                move = integer_translation if kind == "eqt_int" else fractional_translation
                ref, mask = move(orig, t[0], t[1])
            elif kind == "eqr":
                angle = (torch.rand([], generator=generator) * 2 - 1) * (rotate_max * math.pi)
                M.copy_(_rotation(-angle))
                img = G.synthesis(ws)
                ref, ref_mask = fractional_rotation(orig, angle)
                img, img_mask = fractional_pseudo_rotation(img, angle)
                mask = ref_mask * img_mask
            else:
                raise ValueError(f"equivariance_psnr: kind {kind!r} is not eqt_int, eqt_frac or eqr")
            sums += torch.stack([((ref - img).square() * mask).double().sum().cpu(), mask.double().sum().cpu()])
    mse = sums[0] / sums[1]
    return float(math.log10(2) * 20 - mse.log10() * 10)


class EquivarianceMetric(FromOptions):
    """Base of the three equivariance metrics: computed on G_ema itself (``measures_generator``:
    the run calls ``compute_generator``), not on a set of images."""

    measures_generator: ClassVar[bool] = True
    kind: ClassVar[Kind]
    metric_name: ClassVar[str]
    unit = "dB"
    higher_is_better = True
    min_images = 1

    @attrs.frozen
    class Options:
        num_images: int = option(50000, min=1, max=2**24, help="Latents drawn (the paper: 50000).")
        seed: int = option(0, min=0, max=2**32 - 1, max_exclusive=True,
                           help="Seed of the latents and transforms (the paper's code: torch.manual_seed(seed)).")
        batch_size: int = option(4, min=1, max=4096, help="Latents per batch; each batch draws one transform "
                                                          "(the paper's code: 4).")
        translate_max: float = option(0.125, min=0, max=1, help="EQ-T: largest translation, in image widths.")
        rotate_max: float = option(1.0, min=0, max=1, help="EQ-R: largest rotation, in half turns (1 = +-180 deg).")

    @classmethod
    def problems(cls, options, recipe):
        arch = getattr(getattr(recipe, "architecture", None), "name", None)
        if arch is not None and arch != "stylegan3":
            return [("name", f"{cls.metric_name} measures a G with a synthesis-input transform (stylegan3); "
                             f"architecture {arch!r} has none (remove this [[metric]])")]
        return []

    def compute(self, generate, reals, device):
        raise GankitError(f"{self.metric_name}: measured on G itself (through its input transform), not on two "
                          f"image sets; --baselines and --against do not apply (leave them out)")

    def compute_generator(self, G: torch.nn.Module, labels: Callable[[int, torch.Generator], torch.Tensor | None],
                          device: torch.device) -> dict[str, float]:
        """``{"Metrics/<name>": dB}`` for ``G``; ``labels(n, generator)``: a conditional G's
        classes for a batch of ``n`` (None otherwise)."""
        if input_transform(G) is None:
            recipe = getattr(self.context, "recipe", None)
            arch = getattr(getattr(recipe, "architecture", None), "name", None) or type(G).__name__
            raise GankitError(f"{self.metric_name}: architecture {arch!r} has no synthesis-input transform to "
                              f"translate or rotate; the equivariance metrics measure a stylegan3 G")
        o = self.options
        g = torch.Generator().manual_seed(o.seed)
        psnr = equivariance_psnr(G, self.kind, o.num_images, generator=g, labels=lambda n: labels(n, g),
                                 batch_size=o.batch_size, translate_max=o.translate_max, rotate_max=o.rotate_max,
                                 device=device)
        return {f"Metrics/{self.metric_name}": psnr}


class EQT(EquivarianceMetric):
    """EQ-T (StyleGAN3): PSNR in dB of G's output under integer translations of its input against the image shifted by whole pixels; higher is more equivariant. stylegan3 G only."""

    kind = "eqt_int"
    metric_name = "eqt50k_int"


class EQTFrac(EquivarianceMetric):
    """EQ-T frac (StyleGAN3): PSNR in dB under subpixel translations against the image resampled with a Lanczos-3 sinc; higher is more equivariant. stylegan3 G only."""

    kind = "eqt_frac"
    metric_name = "eqt50k_frac"


class EQR(EquivarianceMetric):
    """EQ-R (StyleGAN3): PSNR in dB under rotations of the input against the band-limited rotated image; higher is more equivariant. stylegan3 G only."""

    kind = "eqr"
    metric_name = "eqr50k"


@hookimpl
def register_metrics(register):
    register("eqt50k_int", EQT)
    register("eqt50k_frac", EQTFrac)
    register("eqr50k", EQR)
