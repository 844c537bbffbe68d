"""The augmentation pipeline of ADA as the paper runs it: stylegan2-ada-pytorch's 'bgc', its
other official presets ('bgcfnc' and the others with image-space filtering and noise) and R3GAN's,
in plain PyTorch.

Karras, Aittala, Hellsten, Laine, Lehtinen, Aila 2020, "Training Generative Adversarial Networks
with Limited Data" (arXiv:2006.06676), appendix B, with the probabilities, ranges and execution of
the authors' public stylegan2-ada-pytorch (``training/augment.py``, ``AugmentPipe``; the presets
are ``train.py``'s ``augpipe_specs``). Their custom CUDA ops are replaced by plain PyTorch ones
with the same math: ``upfirdn2d`` is a zero-insertion, a zero pad and a separable convolution
(computed here as depthwise convolutions, the upsampling polyphase), ``grid_sample_gradfix`` is
``F.grid_sample``. The 'r3gan' preset is the pipe R3GAN trains with (Huang, Gokaslan, Kuleshov,
Tompkin 2024, arXiv:2501.05441; the authors' ``train.py``, github.com/brownvc/R3GAN): every
geometric op, the colour ops at half probability, and cutout.

Every op is applied to each sample independently with probability ``p * multiplier`` (the
per-op probability multipliers are AugmentPipe's keyword arguments: 1 in stylegan2-ada-pytorch's
presets, 0.5 for the colour ops of 'r3gan'; an op with multiplier 0 is off and draws nothing),
with fresh draws per call and per sample, in the reference's order, from ``gan_kit.batch_rand`` /
``batch_randn``:

- geometric, composed into one inverse homogeneous 3x3 matrix ``G_inv`` per sample (output pixel
  -> input pixel, pixel units about the image centre), then executed with ONE resampling: reflect
  padding by the margin the whole batch needs, 2x upsampling with the sym6 wavelet low-pass,
  bilinear ``grid_sample`` (zeros outside), 2x downsampling with the same filter. ``xflip``
  (probability 1/2 when applied), ``rotate90`` (k * 90 degrees, k uniform in 0..3), ``xint``
  (integer translation, ``round(U(-r, r) * side)``, r = 0.125), ``scale`` (isotropic,
  ``2^N(0, 0.2)``), ``rotate`` (uniform angle in +-pi * rotate_max, once before and once after
  ``aniso``, each with ``p_rot = 1 - sqrt(1 - p * multiplier)`` so that at least one happens with
  probability ``p * multiplier``), ``aniso`` (``x * s``, ``y / s``, ``s = 2^N(0, 0.2)``),
  ``xfrac`` (``N(0, 0.125) * side``);
- colour, composed into one 4x4 matrix ``C`` per sample acting on ``(r, g, b, 1)``:
  ``brightness`` (``+ N(0, 0.2)``), ``contrast`` (``* 2^N(0, 0.5)``, about 0), ``lumaflip``
  (Householder reflection ``I - 2 v v^T`` about the luma axis ``v = (1, 1, 1) / sqrt(3)``,
  probability 1/2 when applied), ``hue`` (rotation about v by ``U(-pi, pi) * hue_max``),
  ``saturation`` (``v v^T + (I - v v^T) * 2^N(0, 1)``). Images are in [-1, 1], as the
  reference's are, so 0 (the centre of contrast and luma flip) is mid-grey. Hue and saturation
  need three channels: grey images (C = 1) skip them (no draws), and the other ops act on grey
  through the mean of C's three colour rows, as the reference does;
- ``imgfilter`` (appendix B.3, image-space filtering), after the colour ops: four frequency bands
  (``FILTER_BANK``: 0 to pi/8, pi/8 to pi/4, pi/4 to pi/2, pi/2 to pi, built from the sym2
  wavelet's half-band filters), each band ``b`` amplified with probability ``p * multiplier *
  imgfilter_bands[b]`` by ``2^N(0, imgfilter_std)`` (two draws per band, normal then uniform,
  for every band, in band order); after each band's draw the gain vector is divided by
  ``sqrt(sum(expected_power * gains^2))``, expected power ``(10, 1, 1, 1) / 13`` (a 1/f image
  spectrum), so the image keeps its expected power. The per-sample filter ``gains @ FILTER_BANK``
  (43 taps) is applied separably, x then y, to the image reflect-padded by 21 pixels (so H and
  W must be at least 22);
- ``noise`` (appendix B.4, additive RGB noise): ``+ N(0, sigma^2)`` per pixel and channel, with
  ``sigma = |N(0, 1)| * noise_std`` per sample (drawn, then whether to add it with probability
  ``p * multiplier``, then the ``[N, C, H, W]`` noise, for every sample);
- ``cutout``, after the noise (AugmentPipe's image-space corruptions): the pixels whose
  centres lie within ``cutout_size / 2`` of a uniformly drawn point on both axes (in fractions of
  each side: a ``cutout_size * W`` by ``cutout_size * H`` rectangle, clipped by the border) are
  multiplied by 0, mid-grey. DeVries & Taylor 2017, "Improved Regularization of Convolutional
  Neural Networks with Cutout" (arXiv:1708.04552), as AugmentPipe runs it.

Two deliberate differences: a sample no geometric (colour, filter) op touched is passed through
bit-exact, where the reference resamples (filters) it with the identity (which reproduces it to
float rounding, 4e-12 in float64); and under several processes the padding margin is the global
batch's (the reference pads per GPU), so that N processes augment as one does.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch
import torch.nn.functional as F

from gan_kit import GankitError, batch_rand, batch_randn

__all__ = ["PRESETS", "PRESET_MULTIPLIERS", "GEOMETRIC", "COLOUR", "FILTER", "NOISE", "CUTOUT", "OPS", "SYM6",
           "SYM2", "FILTER_BANK", "EXPECTED_POWER", "OfficialPipeline", "upsample2x", "downsample2x", "filter_bank"]

GEOMETRIC = ("xflip", "rotate90", "xint", "scale", "rotate", "aniso", "xfrac")
COLOUR = ("brightness", "contrast", "lumaflip", "hue", "saturation")
FILTER = ("imgfilter",)
NOISE = ("noise",)
CUTOUT = ("cutout",)
#: Every op, in the order the pipeline applies them.
OPS = GEOMETRIC + COLOUR + FILTER + NOISE + CUTOUT

#: stylegan2-ada-pytorch's ``--augpipe`` presets (``train.py``'s ``augpipe_specs``, in its order),
#: and R3GAN's pipe.
PRESETS: dict[str, tuple[str, ...]] = {
    "blit": GEOMETRIC[:3],
    "geom": GEOMETRIC[3:],
    "color": COLOUR,
    "filter": FILTER,
    "noise": NOISE,
    "cutout": CUTOUT,
    "bg": GEOMETRIC,
    "bgc": GEOMETRIC + COLOUR,
    "bgcf": GEOMETRIC + COLOUR + FILTER,
    "bgcfn": GEOMETRIC + COLOUR + FILTER + NOISE,
    "bgcfnc": GEOMETRIC + COLOUR + FILTER + NOISE + CUTOUT,
    "r3gan": GEOMETRIC + COLOUR + CUTOUT,
}

#: The presets' probability multipliers other than 1: R3GAN's ``train.py`` builds its AugmentPipe
#: with ``brightness=0.5, contrast=0.5, lumaflip=0.5, hue=0.5, saturation=0.5`` and 1 for every
#: geometric op and cutout (Huang et al. 2024, github.com/brownvc/R3GAN).
PRESET_MULTIPLIERS: dict[str, dict[str, float]] = {
    "r3gan": {op: 0.5 for op in COLOUR},
}

#: Decomposition low-pass filter of Daubechies' symlet 6 (12 taps; Daubechies 1992, "Ten Lectures
#: on Wavelets", the table PyWavelets ships as 'sym6'): orthonormal, so upsampling and then
#: downsampling with it is the identity. stylegan2-ada-pytorch's geometric anti-aliasing filter.
SYM6 = (0.015404109327027373, 0.0034907120842174702, -0.11799011114819057, -0.048311742585633,
        0.4910559419267466, 0.787641141030194, 0.3379294217276218, -0.07263752278646252,
        -0.021060292512300564, 0.04472490177066578, 0.0017677118642428036, -0.007800708325034148)

#: Extra border of the resampled image, in input pixels, that the downsampling filter reads and
#: then crops (a quarter of the filter's taps, as the reference).
HZ_PAD = len(SYM6) // 4

#: Decomposition low-pass filter of Daubechies' symlet 2 (4 taps, the same as db2; Daubechies
#: 1992): the wavelet of stylegan2-ada-pytorch's image-space filter bank (appendix B.3).
SYM2 = (-0.12940952255092145, 0.22414386804185735, 0.836516303737469, 0.48296291314469025)

#: The expected power of each filter band in a natural image's 1/f spectrum, lowest band first
#: (appendix B.3): the four gains are renormalised so that this weighted power stays 1.
EXPECTED_POWER = (10 / 13, 1 / 13, 1 / 13, 1 / 13)


def _convolve(a: list[float], b: list[float]) -> list[float]:
    """Full 1-D convolution of two tap lists (float64 Python arithmetic)."""
    out = [0.0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _dilate(taps: list[float], factor: int) -> list[float]:
    """``H(z) -> H(z^factor)``: ``factor - 1`` zeros between taps."""
    out = [0.0] * ((len(taps) - 1) * factor + 1)
    out[::factor] = taps
    return out


def filter_bank(wavelet: tuple[float, ...] = SYM2, bands: int = 4) -> tuple[tuple[float, ...], ...]:
    """``bands`` zero-phase (symmetric, odd-length, centred) filters, lowest band first, that split
    the spectrum dyadically and sum to the identity (a unit impulse). With the wavelet's low-pass
    ``H(z)``, the half-band pair ``L(z) = H(z) H(1/z) / 2`` and ``R(z) = H(-z) H(-1/z) / 2`` (``L +
    R = 1`` for an orthonormal wavelet), band 0 is ``L(z) L(z^2) ... L(z^(2^(bands-2)))`` and band
    ``k >= 1`` is ``R(z^(2^(bands-1-k))) L(z) ... L(z^(2^(bands-2-k)))``: band ``bands - 1`` the top
    octave, each lower band the octave below. Karras et al. 2020, appendix B.3. For sym2 and 4
    bands: 43 taps each."""
    h = list(wavelet)
    r = [t * (-1) ** k for k, t in enumerate(h)]  # H(-z)
    low = [t / 2 for t in _convolve(h, h[::-1])]
    high = [t / 2 for t in _convolve(r, r[::-1])]

    def cascade(first: list[float], lows: int) -> list[float]:
        out = first
        for j in range(lows):
            out = _convolve(out, _dilate(low, 2 ** j))
        return out

    rows = [cascade(_dilate(low, 2 ** (bands - 2)), bands - 2)]
    rows += [cascade(_dilate(high, 2 ** (bands - 1 - k)), bands - 1 - k) for k in range(1, bands)]
    taps = len(rows[0])
    return tuple(tuple([0.0] * ((taps - len(row)) // 2) + row + [0.0] * ((taps - len(row)) // 2)) for row in rows)


#: stylegan2-ada-pytorch's image-space filter bank: 4 bands of 43 taps (``filter_bank()``).
FILTER_BANK = filter_bank()
#: Reflect padding of the image-space filter, per side (half its taps).
FILTER_PAD = len(FILTER_BANK[0]) // 2


# --------------------------------------------------------------------------- matrices --


def _matrix(rows: list[list], like: torch.Tensor) -> torch.Tensor:
    """``[N, R, K]`` from R rows of K entries, each an ``[N]`` tensor or a number (broadcast),
    in ``like``'s dtype and device."""
    full = [[e if isinstance(e, torch.Tensor) else torch.full_like(like, float(e)) for e in row] for row in rows]
    return torch.stack([torch.stack(row, dim=-1) for row in full], dim=-2)


def _translate(tx, ty, like):
    return _matrix([[1, 0, tx], [0, 1, ty], [0, 0, 1]], like)


def _scale(sx, sy, like):
    return _matrix([[sx, 0, 0], [0, sy, 0], [0, 0, 1]], like)


def _rotate(theta, like):
    """Rotation by ``theta`` (radians) in image coordinates (x right, y down)."""
    c, s = torch.cos(theta), torch.sin(theta)
    return _matrix([[c, -s, 0], [s, c, 0], [0, 0, 1]], like)


def _const(matrix: torch.Tensor) -> torch.Tensor:
    """A batch-independent ``[3, 3]`` matrix (built for a batch of one)."""
    return matrix[0]


# --------------------------------------------------------------------------- filters --


def _depthwise(x: torch.Tensor, kernel: torch.Tensor, dim: int, stride: int = 1) -> torch.Tensor:
    """Correlate every channel of ``x [N, C, H, W]`` with each of the ``K`` rows of ``kernel
    [K, taps]`` along ``dim`` (2: y, 3: x), keeping every ``stride``-th output, no padding:
    ``[N * C, K, H', W']``. Depthwise on purpose: CPU backends run a one-channel filter over a
    large batch tens of times slower than the same filter as a grouped convolution."""
    n, c, h, w = x.shape
    x = x.reshape(1, n * c, h, w)
    out = []
    for row in kernel.to(x.dtype):  # one convolution per row: a channel multiplier is slow too
        k = (row.view(1, 1, 1, -1) if dim == 3 else row.view(1, 1, -1, 1)).expand(n * c, -1, -1, -1)
        out.append(F.conv2d(x, k.contiguous(), stride=(1, stride) if dim == 3 else (stride, 1), groups=n * c)[0])
    return torch.stack(out, dim=1)


def upsample2x(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """``[N, C, H, W] -> [N, C, 2H, 2W]``: stylegan2-ada-pytorch's ``upsample2d(x, f, up=2)`` for
    ``taps`` of a length divisible by 4 summing to 1: per axis, insert a zero after every pixel,
    pad ``f/2`` zeros before and ``f/2 - 1`` after, convolve with ``2 * taps`` (the gain the zeros
    took away). Computed polyphase (the same sums without the zeros): output pixel ``2q`` is
    ``sum_l g[2l] x[q + l - f/4]``, ``2q + 1`` is ``sum_l g[2l + 1] x[q + l + 1 - f/4]``, ``g`` the
    flipped taps times 2."""
    f = taps.shape[0]
    g = taps.flip(0) * 2  # a convolution is a correlation with the flipped filter
    zero = g.new_zeros(1)
    phases = torch.stack([torch.cat([g[0::2], zero]), torch.cat([zero, g[1::2]])])  # [2, f/2 + 1]
    n, c, h, w = x.shape
    y = _depthwise(F.pad(x, [f // 4, f // 4, 0, 0]), phases, dim=3)  # [NC, 2, H, W]
    y = y.permute(0, 2, 3, 1).reshape(n, c, h, 2 * w)
    y = _depthwise(F.pad(y, [0, 0, f // 4, f // 4]), phases, dim=2)  # [NC, 2, H, 2W]
    return y.permute(0, 2, 1, 3).reshape(n, c, 2 * h, 2 * w)


def downsample2x(x: torch.Tensor, taps: torch.Tensor, crop: int) -> torch.Tensor:
    """``[N, C, H, W] -> [N, C, ceil((H - 2 * crop') / 2), ...]``: crop ``crop - (f - 1) // 2``
    pixels per side (``crop`` counted as the reference's negative padding), correlate with ``taps``
    per axis and keep every second pixel. stylegan2-ada-pytorch's ``downsample2d(x, f, down=2,
    padding=-crop, flip_filter=True)``."""
    f = taps.shape[0]
    lo, hi = crop - (f - 1) // 2, crop - (f - 2) // 2
    h, w = x.shape[2], x.shape[3]
    n, c = x.shape[:2]
    x = x[:, :, lo:h - hi, lo:w - hi]
    x = _depthwise(x, taps[None], dim=3, stride=2).reshape(n, c, x.shape[2], -1)
    return _depthwise(x, taps[None], dim=2, stride=2).reshape(n, c, -1, x.shape[3])


def _global_max(values: torch.Tensor) -> torch.Tensor:
    """The element-wise max over all processes: the padding the global batch needs, so that N
    processes pad, and therefore resample, as one process does."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values


# --------------------------------------------------------------------------- the pipeline --


class OfficialPipeline:
    """``pipeline(images[N,C,H,W], p) -> [N,C,H,W]`` (same dtype): the ops in ``ops`` (names of
    ``OPS``), each applied with probability ``p * multipliers[op]`` (``p`` a 0-dim tensor on the
    images' device; a product above 1 = always; an op missing from ``multipliers`` has 1, one
    with 0 is off and draws nothing, as AugmentPipe's ``if self.xflip > 0``) with the ranges in
    ``options`` (``translate_ratio``, ``scale_std``, ``rotate_max``, ``aniso_std``,
    ``xfrac_std``, ``brightness_std``, ``contrast_std``, ``hue_max``, ``saturation_std``,
    ``imgfilter_bands`` (4 band multipliers), ``imgfilter_std``, ``noise_std``, ``cutout_size``).
    Works in float32 (float64 for float64 images) with autocast off, and casts back. Raises
    ``GankitError`` when a colour op meets images that are neither RGB nor grey, and when
    ``imgfilter`` meets images smaller than 22 pixels on a side (its reflect padding)."""

    def __init__(self, ops: tuple[str, ...], options, name: str, multipliers: Mapping[str, float] | None = None):
        multipliers = multipliers or {}
        self.multipliers = {op: float(multipliers.get(op, 1.0)) for op in ops}
        self.ops = frozenset(op for op in ops if self.multipliers[op] > 0)
        self.o = options
        self.name = name
        self.geometric = any(op in self.ops for op in GEOMETRIC)
        self.colour = any(op in self.ops for op in COLOUR)
        self.imgfilter = "imgfilter" in self.ops
        self.noise = "noise" in self.ops
        self.cutout = "cutout" in self.ops
        # Constant tensors per (device, dtype, size): made once, since a tensor built from a
        # Python list on a GPU is a copy from pageable host memory that waits for the device.
        self._cache: dict[tuple, tuple[torch.Tensor, ...]] = {}

    def _constants(self, dev: torch.device, dtype: torch.dtype, h: int, w: int) -> tuple[torch.Tensor, ...]:
        """``(corners [4,3], margin offset [4], margin limit [4], low-pass taps [12])`` for
        ``h x w`` images: the output corners about the centre, the filters' support, one image
        side, the normalised SYM6 filter."""
        key = ("geometric", dev, dtype, h, w)
        if key not in self._cache:
            cx, cy = (w - 1) / 2, (h - 1) / 2
            taps = torch.tensor(SYM6, dtype=torch.float64)
            self._cache[key] = tuple(t.to(device=dev, dtype=dtype) for t in (
                torch.tensor([[-cx, -cy, 1], [cx, -cy, 1], [cx, cy, 1], [-cx, cy, 1]], dtype=torch.float64),
                torch.tensor([2 * HZ_PAD - cx, 2 * HZ_PAD - cy] * 2, dtype=torch.float64),
                torch.tensor([w - 1, h - 1] * 2, dtype=torch.float64),
                taps / taps.sum()))
        return self._cache[key]

    def _colour_constants(self, dev: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """``(v [4], rgb [4,4])``: the unit luma axis ``(1, 1, 1, 0) / sqrt(3)`` and the
        projection on the colour coordinates."""
        key = ("colour", dev, dtype)
        if key not in self._cache:
            v = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
            self._cache[key] = ((v / math.sqrt(3)).to(device=dev, dtype=dtype), torch.diag(v).to(device=dev, dtype=dtype))
        return self._cache[key]

    def __call__(self, images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        n, c, h, w = images.shape
        dtype = torch.float64 if images.dtype == torch.float64 else torch.float32
        if self.colour and c not in (1, 3):
            raise GankitError(f"augment.pipeline: the colour ops of pipeline {self.name!r} need RGB or grey images "
                              f"(3 or 1 channels), got {c} channels (use pipeline = \"bg\": the geometric ops only)")
        if self.imgfilter and min(h, w) <= FILTER_PAD:
            raise GankitError(f"augment.pipeline: the imgfilter op of pipeline {self.name!r} reflect-pads the images by "
                              f"{FILTER_PAD} pixels, so it needs at least {FILTER_PAD + 1}x{FILTER_PAD + 1}, got "
                              f"{h}x{w} (use pipeline = \"bgc\", or multipliers = {{imgfilter = 0}})")
        with torch.autocast(images.device.type, enabled=False):
            if self.geometric:
                G_inv, touched = self.geometric_matrix(images.shape, images.device, dtype, p.to(dtype))
                images = self.resample(images, G_inv, touched)
            if self.colour:
                C, touched = self.colour_matrix(n, c, images.device, dtype, p.to(dtype))
                images = self.apply_colour(images, C, touched)
            if self.imgfilter:
                gains, touched = self.filter_gains(n, images.device, dtype, p.to(dtype))
                images = self.apply_filter(images, gains, touched)
            if self.noise:
                images = self.add_noise(images, p.to(dtype), dtype)
            if self.cutout:
                images = images * self.cutout_mask(n, images.shape[2], images.shape[3], images.device,
                                                   p).to(images.dtype)
        return images

    # ---- geometric ops: G_inv @ output pixel -> input pixel

    def geometric_matrix(self, shape: torch.Size, dev: torch.device, dtype: torch.dtype,
                         p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(G_inv [N,3,3], touched [N] bool)`` for images of ``shape [N,C,H,W]``: the draws of
        every enabled geometric op in the reference's order (each op draws whether or not it is
        applied, so the RNG use does not depend on p), composed as ``G_inv = G_inv @ op_inv``."""
        o, on, m = self.o, self.ops, self.multipliers
        n, _, height, width = shape
        uniform = lambda *shape: batch_rand(n, *shape, device=dev).to(dtype)  # noqa: E731
        normal = lambda *shape: batch_randn(n, *shape, device=dev).to(dtype)  # noqa: E731
        like = torch.zeros(n, device=dev, dtype=dtype)
        G = torch.eye(3, device=dev, dtype=dtype).expand(n, 3, 3)
        touched = torch.zeros(n, device=dev, dtype=torch.bool)

        def gate(value, identity, prob, shape=()):
            nonlocal touched
            hit = uniform(*shape) < prob
            touched = touched | hit.view(n, -1).any(1)
            return torch.where(hit, value, torch.full_like(value, identity))

        if "xflip" in on:
            i = gate(torch.floor(uniform() * 2), 0.0, p * m["xflip"])
            G = G @ _scale(1 - 2 * i, 1, like)  # its own inverse
        if "rotate90" in on:
            i = gate(torch.floor(uniform() * 4), 0.0, p * m["rotate90"])
            G = G @ _rotate(math.pi / 2 * i, like)  # inverse of a rotation by -i * 90 degrees
        if "xint" in on:
            t = (uniform(2) * 2 - 1) * o.translate_ratio
            t = gate(t, 0.0, p * m["xint"], shape=(1,))
            G = G @ _translate(-torch.round(t[:, 0] * width), -torch.round(t[:, 1] * height), like)
        if "scale" in on:
            s = gate(torch.exp2(normal() * o.scale_std), 1.0, p * m["scale"])
            G = G @ _scale(1 / s, 1 / s, like)
        if "rotate" in on:
            # Rotation before and after anisotropic scaling, each with p_rot: P(either) =
            # p * multiplier, as the reference's (1 - rotate * p).clamp(0, 1).
            p_rot = 1 - torch.sqrt((1 - p * m["rotate"]).clamp(0, 1))
            theta = gate((uniform() * 2 - 1) * math.pi * o.rotate_max, 0.0, p_rot)
            G = G @ _rotate(theta, like)
        if "aniso" in on:
            s = gate(torch.exp2(normal() * o.aniso_std), 1.0, p * m["aniso"])
            G = G @ _scale(1 / s, s, like)
        if "rotate" in on:
            theta = gate((uniform() * 2 - 1) * math.pi * o.rotate_max, 0.0, p_rot)
            G = G @ _rotate(theta, like)
        if "xfrac" in on:
            t = gate(normal(2) * o.xfrac_std, 0.0, p * m["xfrac"], shape=(1,))
            G = G @ _translate(-t[:, 0] * width, -t[:, 1] * height, like)
        return G, touched

    def resample(self, images: torch.Tensor, G_inv: torch.Tensor, touched: torch.Tensor) -> torch.Tensor:
        """Execute ``G_inv [N,3,3]`` on ``images`` with one anti-aliased resampling (module
        docstring); samples not ``touched`` are returned as they are."""
        _, c, h, w = images.shape
        dev, dtype = images.device, G_inv.dtype
        one = torch.ones(1, device=dev, dtype=dtype)
        # Reflect padding wide enough for the corners of every sample's output plus the filters'
        # support (at most one image side), the max over the batch as the reference does. A
        # strongly shrunk sample reads near the pad's edge, where the upsampling's zeros reach, so
        # its pixels depend on the batch's margin (by up to ~1e-4): the margin is that of the
        # global batch (one all-reduce of 4 numbers when training under several processes).
        corners, offset, limit, taps = self._constants(dev, dtype, h, w)
        xy = (G_inv @ corners.t())[:, :2, :].permute(1, 0, 2).flatten(1)  # [xy, N * corner]
        margin = torch.cat([-xy, xy]).amax(dim=1)  # left, top, right, bottom
        margin = (margin + offset).clamp(min=0).minimum(limit)
        # The call's one host read (the reference's too: the pad widths must be Python ints),
        # which also brings the number of touched samples.
        count = touched.sum().reshape(1).to(dtype)
        mx0, my0, mx1, my1, k = (int(v) for v in torch.cat([_global_max(margin).ceil(), count]).tolist())
        # Only the touched samples are resampled (the others are returned as they are): the
        # padded, upsampled images are up to 36 times larger than the input. Their indices,
        # ascending, without nonzero's second sync: a stable sort puts the touched first.
        if k == 0:
            return images
        picked = torch.argsort((~touched).to(torch.uint8), stable=True)[:k]
        x = F.pad(images.index_select(0, picked).to(dtype), [mx0, mx1, my0, my1], mode="reflect")
        G = _const(_translate((mx0 - mx1) / 2, (my0 - my1) / 2, one)) @ G_inv.index_select(0, picked)
        x = upsample2x(x, taps)
        # Into the upsampled image's pixels: twice the scale, pixel centres half a pixel in.
        G = _const(_scale(2, 2, one)) @ G @ _const(_scale(0.5, 0.5, one))
        G = _const(_translate(-0.5, -0.5, one)) @ G @ _const(_translate(0.5, 0.5, one))
        # Into grid_sample's [-1, 1] coordinates, for an output HZ_PAD pixels wider per side.
        out_h, out_w = (h + 2 * HZ_PAD) * 2, (w + 2 * HZ_PAD) * 2
        G = (_const(_scale(2 / x.shape[3], 2 / x.shape[2], one)) @ G
             @ _const(_scale(out_w / 2, out_h / 2, one)))
        grid = F.affine_grid(G[:, :2, :], [picked.numel(), c, out_h, out_w], align_corners=False)
        y = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        y = downsample2x(y, taps, crop=2 * HZ_PAD).to(images.dtype)
        return images.index_copy(0, picked, y)

    # ---- colour ops: C @ (r, g, b, 1)

    def colour_matrix(self, n: int, c: int, dev: torch.device, dtype: torch.dtype,
                      p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(C [N,4,4], touched [N] bool)``: the draws of every enabled colour op in the
        reference's order, composed as ``C = op @ C``. Hue and saturation need C = 3 channels
        (no draws for grey images)."""
        o, on, m = self.o, self.ops, self.multipliers
        uniform = lambda *shape: batch_rand(n, *shape, device=dev).to(dtype)  # noqa: E731
        normal = lambda *shape: batch_randn(n, *shape, device=dev).to(dtype)  # noqa: E731
        eye = torch.eye(4, device=dev, dtype=dtype)
        C = eye.expand(n, 4, 4)
        touched = torch.zeros(n, device=dev, dtype=torch.bool)

        def gate(value, identity, op, shape=()):
            nonlocal touched
            hit = uniform(*shape) < p * m[op]
            touched = touched | hit.view(n, -1).any(1)
            return torch.where(hit, value, torch.full_like(value, identity))

        like = torch.zeros(n, device=dev, dtype=dtype)
        if "brightness" in on:
            b = gate(normal() * o.brightness_std, 0.0, "brightness")
            C = _matrix([[1, 0, 0, b], [0, 1, 0, b], [0, 0, 1, b], [0, 0, 0, 1]], like) @ C
        if "contrast" in on:
            k = gate(torch.exp2(normal() * o.contrast_std), 1.0, "contrast")
            C = _matrix([[k, 0, 0, 0], [0, k, 0, 0], [0, 0, k, 0], [0, 0, 0, 1]], like) @ C
        v, rgb = self._colour_constants(dev, dtype)
        vv = torch.outer(v, v)
        if "lumaflip" in on:
            i = gate(torch.floor(uniform(1, 1) * 2), 0.0, "lumaflip", shape=(1, 1))
            C = (eye - 2 * vv * i) @ C  # Householder reflection of the luma axis
        if "hue" in on and c > 1:
            theta = gate((uniform() * 2 - 1) * math.pi * o.hue_max, 0.0, "hue").view(n, 1, 1)
            # Rodrigues: rotation about the unit axis v = cos I + sin [v]x + (1 - cos) v v^T.
            cross = torch.zeros(4, 4, device=dev, dtype=dtype)
            cross[0, 1], cross[0, 2], cross[1, 2] = -v[2], v[1], -v[0]
            cross = cross - cross.t()
            C = (torch.cos(theta) * rgb + torch.sin(theta) * cross + (1 - torch.cos(theta)) * vv
                 + (eye - rgb)) @ C
        if "saturation" in on and c > 1:
            s = gate(torch.exp2(normal(1, 1) * o.saturation_std), 1.0, "saturation", shape=(1, 1))
            C = (vv + (eye - vv) * s) @ C
        return C, touched

    @staticmethod
    def apply_colour(images: torch.Tensor, C: torch.Tensor, touched: torch.Tensor) -> torch.Tensor:
        """``C [N,4,4]`` applied to every pixel's ``(r, g, b, 1)``; for grey images the mean of
        C's colour rows, ``gray * sum(row[:3]) + row[3]``. Samples not ``touched`` stay as they are."""
        n, c, h, w = images.shape
        x = images.to(C.dtype).reshape(n, c, h * w)
        if c == 3:
            y = C[:, :3, :3] @ x + C[:, :3, 3:]
        else:
            row = C[:, :3, :].mean(dim=1, keepdim=True)  # [N, 1, 4]
            y = x * row[:, :, :3].sum(dim=2, keepdim=True) + row[:, :, 3:]
        y = y.reshape(n, c, h, w).to(images.dtype)
        return torch.where(touched.view(-1, 1, 1, 1), y, images)

    # ---- image-space filtering: per-sample gains of 4 frequency bands

    def filter_gains(self, n: int, dev: torch.device, dtype: torch.dtype,
                     p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(gains [N, 4], touched [N] bool)``: per band, lowest first, the draws ``2^N(0,
        imgfilter_std)`` (normal) and whether to apply them (uniform, probability ``p *
        multiplier * imgfilter_bands[band]``) - for every band, one with multiplier 0 included, as
        the reference - each followed by the renormalisation to expected power 1 (module
        docstring). An untouched sample's gains are the identity's up to that renormalisation's
        rounding; it is passed through instead."""
        o, m = self.o, self.multipliers["imgfilter"]
        bands = len(FILTER_BANK)
        power = torch.tensor(EXPECTED_POWER, dtype=torch.float64).to(device=dev, dtype=dtype)
        gains = torch.ones(n, bands, device=dev, dtype=dtype)
        touched = torch.zeros(n, device=dev, dtype=torch.bool)
        for band, strength in enumerate(o.imgfilter_bands):
            gain = torch.exp2(batch_randn(n, device=dev).to(dtype) * o.imgfilter_std)
            hit = batch_rand(n, device=dev).to(dtype) < p * m * float(strength)
            touched = touched | hit
            t = torch.ones(n, bands, device=dev, dtype=dtype)
            t[:, band] = torch.where(hit, gain, torch.ones_like(gain))
            gains = gains * t / (power * t.square()).sum(dim=1, keepdim=True).sqrt()
        return gains, touched

    def apply_filter(self, images: torch.Tensor, gains: torch.Tensor, touched: torch.Tensor) -> torch.Tensor:
        """Filter each sample of ``images [N,C,H,W]`` with ``gains [N, 4] @ FILTER_BANK`` (43
        symmetric taps), x then y, over the image reflect-padded by ``FILTER_PAD``. Untouched
        samples stay as they are (computed for the whole batch and selected: no host read)."""
        n, c, h, w = images.shape
        key = ("filter", gains.device, gains.dtype)
        if key not in self._cache:
            self._cache[key] = (torch.tensor(FILTER_BANK, dtype=torch.float64).to(device=gains.device, dtype=gains.dtype),)
        taps = (gains @ self._cache[key][0]).repeat_interleave(c, dim=0)  # [N * C, 43]
        x = F.pad(images.to(gains.dtype).reshape(1, n * c, h, w), [FILTER_PAD] * 4, mode="reflect")
        x = F.conv2d(x, taps[:, None, None, :], groups=n * c)  # symmetric taps: correlation = convolution
        x = F.conv2d(x, taps[:, None, :, None], groups=n * c)
        y = x.reshape(n, c, h, w).to(images.dtype)
        return torch.where(touched.view(-1, 1, 1, 1), y, images)

    # ---- additive RGB noise

    def add_noise(self, images: torch.Tensor, p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``images + N(0, 1)[N,C,H,W] * sigma``, ``sigma = |N(0, 1)| * noise_std`` per sample and
        0 for a sample not picked (probability ``p * multiplier``). Draws, as the reference:
        sigma's normal, the pick's uniform, then the noise for every sample."""
        n, c, h, w = images.shape
        dev = images.device
        sigma = batch_randn(n, 1, 1, 1, device=dev).to(dtype).abs() * self.o.noise_std
        hit = batch_rand(n, 1, 1, 1, device=dev).to(dtype) < p * self.multipliers["noise"]
        sigma = torch.where(hit, sigma, torch.zeros_like(sigma))
        noise = batch_randn(n, c, h, w, device=dev).to(dtype)
        return (images.to(dtype) + noise * sigma).to(images.dtype)

    # ---- cutout: a mask multiply

    def cutout_mask(self, n: int, h: int, w: int, dev: torch.device, p: torch.Tensor) -> torch.Tensor:
        """``[N, 1, H, W]`` float32, 0 inside each sample's cutout rectangle and 1 elsewhere (all 1
        for a sample not cut). Draws, as the reference: whether to cut (probability ``p *
        multiplier``), then the centre, uniform in [0, 1)^2 of the image, x then y. A pixel is cut
        when its centre ``((j + 0.5) / W, (i + 0.5) / H)`` is nearer the drawn centre than
        ``cutout_size / 2`` on both axes. Computed in float32 whatever the images' dtype, the
        reference's arithmetic, so every dtype cuts the same pixels."""
        hit = batch_rand(n, 1, 1, 1, 1, device=dev) < p.float() * self.multipliers["cutout"]
        half = torch.where(hit, self.o.cutout_size / 2, 0.0)[:, 0]  # [N, 1, 1, 1]; 0: nothing cut
        centre = batch_rand(n, 2, 1, 1, 1, device=dev)
        xs = (torch.arange(w, device=dev, dtype=torch.float32) + 0.5) / w
        ys = (torch.arange(h, device=dev, dtype=torch.float32) + 0.5) / h
        keep_x = (xs.view(1, 1, 1, w) - centre[:, 0]).abs() >= half  # [N, 1, 1, W]
        keep_y = (ys.view(1, 1, h, 1) - centre[:, 1]).abs() >= half  # [N, 1, H, 1]
        return (keep_x | keep_y).to(torch.float32)
