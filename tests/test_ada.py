"""ADA's full pipeline as the paper runs it: every op of stylegan2-ada-pytorch's
'bgcfnc' (and its presets, and R3GAN's 'r3gan' with its cutout and per-op probability multipliers)
equals the reference's formulas on the same draws, the ops are applied with the reference's
probabilities, p moves by the reference's rule, and old 'ada' recipes either keep their meaning
or get a one-line error.

The reference here is written from the paper (arXiv:2006.06676, appendix B) and
stylegan2-ada-pytorch's ``training/augment.py`` / ``training/training_loop.py``, independently of
gankit's code: the draws are replayed from torch's RNG in the reference's order, every matrix is
built entry by entry in float64 NumPy, the upsampling is ``scipy.signal.upfirdn``, the bilinear
sampler and the downsampling are explicit loops over taps, and the hue rotation is SciPy's
rotation about the luma axis; the image-space filter bank is built by the reference's recursion
(upsample, convolve with the half-band low-pass, add the half-band high-pass), its gains
renormalised band by band, and applied tap by tap over the reflect-padded image; the noise is
added from its replayed draws; cutout's mask is computed from the drawn centres in float64.
(``tests/test_ada_official.py`` compares with outputs recorded from the official code itself.)
Tolerance: 1e-9 in float64 (the identity resampling the reference
applies to untouched samples reproduces them to ~4e-12, the precision of the 16-digit sym6 table).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.signal
import torch
from scipy.spatial.transform import Rotation

from gan_kit import GankitError
from gan_kit.builtin.augment.ada import AdaptiveAugment
from gan_kit.builtin.augment.ada_pipeline import COLOUR, FILTER_BANK, GEOMETRIC, OPS, PRESETS, SYM2, SYM6, OfficialPipeline

OPTIONS = AdaptiveAugment.Options()  # the official ranges
TOL = 1e-9

#: R3GAN's AugmentPipe (Huang et al. 2024, github.com/brownvc/R3GAN, train.py's augment_kwargs):
#: the probability multiplier of every op.
R3GAN_AUGMENT = dict(xflip=1, rotate90=1, xint=1, scale=1, rotate=1, aniso=1, xfrac=1, brightness=0.5, contrast=0.5,
                     lumaflip=0.5, hue=0.5, saturation=0.5, cutout=1)


def images(n, c, h, w, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, c, h, w, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)


# ----------------------------------------------------------------- the float64 reference --


def eye(n, k):
    return np.tile(np.eye(k), (n, 1, 1))


def reference_matrices(ops, n, c, p, o=OPTIONS, h=None, w=None, mult=None):
    """Replay AugmentPipe's draws (torch's global RNG, float32, in its order) and build G_inv
    [n,3,3] (output pixel -> input pixel) and C [n,4,4] in float64, entry by entry. ``mult``:
    AugmentPipe's probability multipliers (op -> number; missing = 1): an op runs with
    probability p * multiplier, and one with multiplier 0 is skipped (no draws)."""
    rand = lambda *s: torch.rand(n, *s).double().numpy().reshape(n, -1)  # noqa: E731
    randn = lambda *s: torch.randn(n, *s).double().numpy().reshape(n, -1)  # noqa: E731
    mult = {op: (mult or {}).get(op, 1) for op in ops}
    ops = [op for op in ops if mult[op] > 0]
    pr = {op: p * mult[op] for op in ops}  # each op's probability

    def translate(tx, ty):
        m = eye(n, 3)
        m[:, 0, 2], m[:, 1, 2] = tx, ty
        return m

    def scale(sx, sy):
        m = eye(n, 3)
        m[:, 0, 0], m[:, 1, 1] = sx, sy
        return m

    def rotate(t):
        m = eye(n, 3)
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = np.cos(t), -np.sin(t), np.sin(t), np.cos(t)
        return m

    G = eye(n, 3)
    if "xflip" in ops:
        i = np.floor(rand()[:, 0] * 2)
        i = np.where(rand()[:, 0] < pr["xflip"], i, 0)
        G = G @ np.linalg.inv(scale(1 - 2 * i, np.ones(n)))
    if "rotate90" in ops:
        i = np.floor(rand()[:, 0] * 4)
        i = np.where(rand()[:, 0] < pr["rotate90"], i, 0)
        G = G @ np.linalg.inv(rotate(-np.pi / 2 * i))
    if "xint" in ops:
        t = (rand(2) * 2 - 1) * o.translate_ratio
        t = np.where(rand(1) < pr["xint"], t, 0)
        G = G @ np.linalg.inv(translate(np.round(t[:, 0] * w), np.round(t[:, 1] * h)))
    if "scale" in ops:
        s = np.exp2(randn()[:, 0] * o.scale_std)
        s = np.where(rand()[:, 0] < pr["scale"], s, 1)
        G = G @ np.linalg.inv(scale(s, s))
    p_rot = 1 - math.sqrt(min(max(1 - p * mult.get("rotate", 1), 0), 1))  # P(pre or post) = p * mult
    if "rotate" in ops:
        t = (rand()[:, 0] * 2 - 1) * np.pi * o.rotate_max
        t = np.where(rand()[:, 0] < p_rot, t, 0)
        G = G @ np.linalg.inv(rotate(-t))
    if "aniso" in ops:
        s = np.exp2(randn()[:, 0] * o.aniso_std)
        s = np.where(rand()[:, 0] < pr["aniso"], s, 1)
        G = G @ np.linalg.inv(scale(s, 1 / s))
    if "rotate" in ops:
        t = (rand()[:, 0] * 2 - 1) * np.pi * o.rotate_max
        t = np.where(rand()[:, 0] < p_rot, t, 0)
        G = G @ np.linalg.inv(rotate(-t))
    if "xfrac" in ops:
        t = randn(2) * o.xfrac_std
        t = np.where(rand(1) < pr["xfrac"], t, 0)
        G = G @ np.linalg.inv(translate(t[:, 0] * w, t[:, 1] * h))

    C = eye(n, 4)
    v = np.array([1.0, 1.0, 1.0, 0.0]) / np.sqrt(3)
    vv = np.outer(v, v)
    if "brightness" in ops:
        b = randn()[:, 0] * o.brightness_std
        b = np.where(rand()[:, 0] < pr["brightness"], b, 0)
        m = eye(n, 4)
        m[:, :3, 3] = b[:, None]
        C = m @ C
    if "contrast" in ops:
        k = np.exp2(randn()[:, 0] * o.contrast_std)
        k = np.where(rand()[:, 0] < pr["contrast"], k, 1)
        C = np.stack([np.diag([kk, kk, kk, 1.0]) for kk in k]) @ C
    if "lumaflip" in ops:
        i = np.floor(rand()[:, 0] * 2)
        i = np.where(rand()[:, 0] < pr["lumaflip"], i, 0)
        C = (np.eye(4) - 2 * vv * i[:, None, None]) @ C  # Householder reflection of the luma axis
    if "hue" in ops and c > 1:
        t = (rand()[:, 0] * 2 - 1) * np.pi * o.hue_max
        t = np.where(rand()[:, 0] < pr["hue"], t, 0)
        m = eye(n, 4)
        m[:, :3, :3] = Rotation.from_rotvec(t[:, None] * v[None, :3]).as_matrix()
        C = m @ C
    if "saturation" in ops and c > 1:
        s = np.exp2(randn()[:, 0] * o.saturation_std)
        s = np.where(rand()[:, 0] < pr["saturation"], s, 1)
        C = (vv + (np.eye(4) - vv) * s[:, None, None]) @ C
    return G, C


def reference_resample(x, G):
    """The reference's one resampling of ``x [n,c,h,w]`` by ``G_inv``, in float64 NumPy."""
    n, c, h, w = x.shape
    f = np.array(SYM6) / np.sum(SYM6)
    hz = len(f) // 4
    cx, cy = (w - 1) / 2, (h - 1) / 2
    pts = G @ np.array([[-cx, -cy, 1], [cx, -cy, 1], [cx, cy, 1], [-cx, cy, 1]]).T  # [n, 3, corner]
    px, py = pts[:, 0], pts[:, 1]
    margin = [(-px).max() + 2 * hz - cx, (-py).max() + 2 * hz - cy, px.max() + 2 * hz - cx, py.max() + 2 * hz - cy]
    mx0, my0, mx1, my1 = (int(np.ceil(min(max(m, 0), lim))) for m, lim in zip(margin, [w - 1, h - 1] * 2))
    x = np.pad(x, ((0, 0), (0, 0), (my0, my1), (mx0, mx1)), mode="reflect")
    hp, wp = x.shape[2:]
    # 2x upsampling: zero insertion + full convolution with 2 f per axis, aligned as upsample2d.
    x = scipy.signal.upfirdn(2 * f, x, up=2, axis=3)[..., 5:5 + 2 * wp]
    x = scipy.signal.upfirdn(2 * f, x, up=2, axis=2)[..., 5:5 + 2 * hp, :]
    hu, wu = x.shape[2:]

    def T(tx, ty):
        return np.array([[1, 0, tx], [0, 1, ty], [0, 0, 1.0]])

    def S(s):
        return np.diag([s, s, 1.0])

    M = T(-0.5, -0.5) @ S(2) @ T((mx0 - mx1) / 2, (my0 - my1) / 2) @ G @ S(0.5) @ T(0.5, 0.5)
    oh, ow = (h + 2 * hz) * 2, (w + 2 * hz) * 2
    jj, ii = np.meshgrid(np.arange(ow) - (ow - 1) / 2, np.arange(oh) - (oh - 1) / 2)
    out_pts = np.stack([jj.ravel(), ii.ravel(), np.ones(oh * ow)])
    y = np.zeros((n, c, oh * ow))
    for s in range(n):  # explicit bilinear sampling, zeros outside
        ix, iy, _ = M[s] @ out_pts
        ix, iy = ix + (wu - 1) / 2, iy + (hu - 1) / 2
        x0, y0 = np.floor(ix).astype(int), np.floor(iy).astype(int)
        for dy in (0, 1):
            for dx in (0, 1):
                wgt = (1 - np.abs(ix - (x0 + dx))) * (1 - np.abs(iy - (y0 + dy)))
                inside = (x0 + dx >= 0) & (x0 + dx < wu) & (y0 + dy >= 0) & (y0 + dy < hu)
                yy, xx = np.clip(y0 + dy, 0, hu - 1), np.clip(x0 + dx, 0, wu - 1)
                y[s] += np.where(inside, wgt, 0) * x[s][:, yy, xx]
    y = y.reshape(n, c, oh, ow)[:, :, 1:-1, 1:-1]  # the downsampling's crop
    # 2x downsampling: correlation with f per axis, every second pixel.
    y = sum(f[k] * y[..., k:k + 2 * w:2] for k in range(len(f)))
    return sum(f[k] * y[:, :, k:k + 2 * h:2, :] for k in range(len(f)))


def reference_cutout(x, p, mult=1, size=OPTIONS.cutout_size):
    """AugmentPipe's cutout of ``x [n,c,h,w]`` from torch's RNG: per sample whether to cut
    (probability p * mult), then the centre (x, y) in [0, 1)^2; the pixels whose centres are
    nearer it than size / 2 on both axes (in fractions of each side) become 0."""
    n, c, h, w = x.shape
    cut = torch.rand(n, 1, 1, 1, 1).double().numpy().reshape(n) < p * mult
    cx, cy = torch.rand(n, 2, 1, 1, 1).double().numpy().reshape(n, 2).T
    half = np.where(cut, size, 0.0)[:, None, None] / 2
    inside_x = np.abs((np.arange(w) + 0.5)[None, None, :] / w - cx[:, None, None]) < half  # [n, 1, w]
    inside_y = np.abs((np.arange(h) + 0.5)[None, :, None] / h - cy[:, None, None]) < half  # [n, h, 1]
    return x * ~(inside_x & inside_y)[:, None]


def reference_colour(x, C):
    n, c, h, w = x.shape
    x = x.reshape(n, c, h * w)
    if c == 3:
        y = np.einsum("nij,njp->nip", C[:, :3, :3], x) + C[:, :3, 3:]
    else:
        row = C[:, :3, :].mean(axis=1)  # grey: the mean of the three colour rows
        y = x * row[:, :3].sum(axis=1)[:, None, None] + row[:, 3][:, None, None]
    return y.reshape(n, c, h, w)


def reference_bank(wavelet=SYM2, bands=4):
    """The image-space filter bank by the reference's recursion: start from a unit impulse in
    band 0; per level, upsample every band by 2 (zero insertion), convolve it with the half-band
    low-pass ``H(z) H(1/z) / 2``, and add the half-band high-pass ``H(-z) H(-1/z) / 2``, centred,
    to the next band."""
    lo = np.array(wavelet)
    hi = lo * (-1.0) ** np.arange(lo.size)
    lo2, hi2 = np.convolve(lo, lo[::-1]) / 2, np.convolve(hi, hi[::-1]) / 2
    bank = np.zeros((bands, 1))
    bank[0, 0] = 1
    for i in range(1, bands):
        up = np.zeros((bands, 2 * bank.shape[1] - 1))
        up[:, ::2] = bank
        bank = np.stack([np.convolve(row, lo2) for row in up])
        start = (bank.shape[1] - hi2.size) // 2
        bank[i, start:start + hi2.size] += hi2
    return bank


def reference_filter(x, p, mult=1, bands=OPTIONS.imgfilter_bands, std=OPTIONS.imgfilter_std):
    """AugmentPipe's image-space filtering from torch's RNG: per band, a gain 2^N(0, std) applied
    with probability p * mult * bands[i], the gain vector renormalised to expected power
    (10, 1, 1, 1) / 13 after each band; then the per-sample filter gains @ bank, applied along x
    then y over the image reflect-padded by half its taps."""
    n, c, h, w = x.shape
    bank = reference_bank()
    power = np.array([10, 1, 1, 1]) / 13
    g = np.ones((n, 4))
    for i, strength in enumerate(bands):
        t_i = np.exp2(torch.randn(n).double().numpy() * std)
        t_i = np.where(torch.rand(n).double().numpy() < p * mult * strength, t_i, 1)
        t = np.ones((n, 4))
        t[:, i] = t_i
        g = g * t / np.sqrt((power * t ** 2).sum(axis=1, keepdims=True))
    taps = g @ bank  # [n, 43]
    k = taps.shape[1]
    pad = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="reflect")
    y = sum(taps[:, None, None, None, j] * xp[..., j:j + w] for j in range(k))
    return sum(taps[:, None, None, None, j] * y[:, :, j:j + h, :] for j in range(k))


def reference_noise(x, p, mult=1, std=OPTIONS.noise_std):
    """AugmentPipe's additive RGB noise from torch's RNG: sigma = |N(0, 1)| * std per sample,
    kept with probability p * mult, then N(0, 1) noise for every pixel times sigma."""
    n = x.shape[0]
    sigma = np.abs(torch.randn(n, 1, 1, 1).double().numpy()) * std
    sigma = np.where(torch.rand(n, 1, 1, 1).double().numpy() < p * mult, sigma, 0)
    return x + torch.randn(*x.shape).double().numpy() * sigma


def reference(ops, x, p, mult=None):
    """The reference's output for ``x`` (torch, float64) from torch's current RNG state."""
    n, c, h, w = x.shape
    mult = mult or {}
    on = [op for op in ops if mult.get(op, 1) > 0]
    G, C = reference_matrices(ops, n, c, p, h=h, w=w, mult=mult)
    y = x.numpy()
    if any(op in on for op in GEOMETRIC):
        y = reference_resample(y, G)
    if any(op in on for op in COLOUR):
        y = reference_colour(y, C)
    if "imgfilter" in on:
        y = reference_filter(y, p, mult.get("imgfilter", 1))
    if "noise" in on:
        y = reference_noise(y, p, mult.get("noise", 1))
    if "cutout" in on:
        y = reference_cutout(y, p, mult.get("cutout", 1))
    return torch.from_numpy(np.ascontiguousarray(y)), G


def ours(ops, x, p, mult=None):
    pipe = OfficialPipeline(tuple(ops), OPTIONS, "test", mult)
    return pipe(x, torch.tensor(p))


# --------------------------------------------------------------------------- the tests --


def test_sym6_is_the_orthonormal_wavelet_low_pass():
    f = np.array(SYM6)
    assert np.sum(f) == pytest.approx(math.sqrt(2), abs=1e-12) and np.sum(f * f) == pytest.approx(1, abs=1e-11)
    for shift in range(1, 6):  # orthogonal to its even shifts: up then down is the identity
        assert abs(np.dot(f[:-2 * shift], f[2 * shift:])) < 1e-11


def test_the_filter_bank_is_the_references_four_bands_summing_to_the_identity():
    """gankit's closed form (band products of dilated half-band filters) equals the reference's
    recursion; the bands are symmetric and add up to a unit impulse (no filtering at unit gains)."""
    bank = np.array(FILTER_BANK)
    assert bank.shape == (4, 43)
    np.testing.assert_allclose(bank, reference_bank(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(bank, bank[:, ::-1], rtol=0, atol=1e-15)
    np.testing.assert_allclose(bank.sum(0), np.eye(43)[21], rtol=0, atol=1e-11)  # the 16-digit sym2 table
    # Band k passes its octave: the response at the band's centre frequency dominates the others.
    freqs = np.array([np.pi / 16, 3 * np.pi / 16, 3 * np.pi / 8, 3 * np.pi / 4])
    response = np.abs(bank @ np.exp(-1j * np.outer(np.arange(43) - 21, freqs)))  # [band, freq]
    assert (response.argmax(axis=0) == np.arange(4)).all()


#: Image sizes per case: the filter reflect-pads by 21, so its cases need 22 pixels a side.
def _size(op, c):
    filtered = op == "imgfilter" or "imgfilter" in PRESETS.get(op, ())
    return ((24, 28) if c == 3 else (22, 22)) if filtered else ((8, 12) if c == 3 else (8, 8))


CASES = [(op, c, *_size(op, c)) for c in (3, 1) for op in OPS]
CASES += [(name, c, *_size(name, c)) for name in PRESETS for c in (1, 3)]


@pytest.mark.parametrize("op,c,h,w", CASES, ids=[f"{o}-c{c}-{h}x{w}" for o, c, h, w in CASES])
def test_every_op_equals_the_reference_on_the_same_draws(op, c, h, w):
    """Each op alone, and each preset as 'ada' builds it (its multipliers included: R3GAN's for
    'r3gan', 1 for the others), against the reference with AugmentPipe's keyword arguments."""
    if op in PRESETS:
        ops, mult = PRESETS[op], (R3GAN_AUGMENT if op == "r3gan" else {})
        pipe = AdaptiveAugment(AdaptiveAugment.Options(pipeline=op)).pipeline
    else:
        ops, mult = (op,), {}
        pipe = OfficialPipeline(ops, OPTIONS, "test")
    x = images(12, c, h, w, seed=1)
    torch.manual_seed(3)
    y = pipe(x, torch.tensor(0.5))
    after = torch.rand(1)
    torch.manual_seed(3)
    expected, G = reference(ops, x, 0.5, mult)
    assert torch.equal(torch.rand(1), after)  # the same number of draws, in the same order
    torch.testing.assert_close(y, expected, rtol=0, atol=TOL)
    changed = (y - x).flatten(1).abs().amax(1) > 1e-6
    if op == "cutout":  # a cut sample has exactly a quarter of its pixels zeroed, or fewer at the border
        cut = (y == 0) & (x != 0)
        assert torch.equal(cut, y != x) and (cut.flatten(1).sum(1) <= c * h * w // 4).all()
    if op in ("hue", "saturation") and c == 1:
        assert torch.equal(y, x)  # no chroma to turn or scale: skipped, as the reference does
    elif op in PRESETS or op == "imgfilter":  # imgfilter: 4 bands at p = 0.5 leave 1 sample in 16
        assert changed.any()
    else:
        assert changed.any() and not changed.all()  # p = 0.5: some samples transformed, some not


@pytest.mark.parametrize("name,side,p", [("bgc", 4, 1.0), ("bgc", 16, 1.25), ("r3gan", 4, 1.0), ("r3gan", 16, 1.25)])
def test_bgc_and_r3gan_equal_the_reference_on_tiny_images_and_p_above_one(name, side, p):
    x = images(8, 3, side, side, seed=2)
    torch.manual_seed(5)
    y = AdaptiveAugment(AdaptiveAugment.Options(pipeline=name)).pipeline(x, torch.tensor(p))
    torch.manual_seed(5)
    expected, _ = reference(PRESETS[name], x, p, R3GAN_AUGMENT if name == "r3gan" else None)
    torch.testing.assert_close(y, expected, rtol=0, atol=TOL)
    assert ((y - x).flatten(1).abs().amax(1) > 1e-3).all()  # p >= 1: every sample transformed


#: Multipliers of every kind: below 1, above 1 (p * multiplier > 1: always), 0 (off, no draws),
#: the rotate pair's p_rot from its own multiplier.
MIXED = dict(xflip=0.3, rotate90=0, xint=1.5, scale=0.7, rotate=1.7, aniso=0.2, xfrac=2.5, brightness=0.5,
             contrast=0, lumaflip=1.2, hue=0.4, saturation=2.2, cutout=0.6)


@pytest.mark.parametrize("c,mult", [(3, MIXED), (1, MIXED), (3, {"rotate": 0.4, "cutout": 2.5})],
                         ids=["rgb-mixed", "grey-mixed", "rgb-rotate-cutout"])
def test_per_op_multipliers_equal_the_reference_on_the_same_draws(c, mult):
    """Each op with probability p * multiplier, as AugmentPipe's keyword arguments; an op at 0
    draws nothing (the same draws as without it, checked by the RNG state after the call)."""
    x = images(12, c, 8, 12, seed=11)
    torch.manual_seed(4)
    y = ours(PRESETS["r3gan"], x, 0.5, mult)
    after = torch.rand(1)
    torch.manual_seed(4)
    expected, _ = reference(PRESETS["r3gan"], x, 0.5, mult)
    assert torch.equal(torch.rand(1), after)
    torch.testing.assert_close(y, expected, rtol=0, atol=TOL)
    torch.manual_seed(4)
    assert not torch.allclose(ours(PRESETS["r3gan"], x, 0.5), y, atol=1e-3)  # the multipliers mattered


def test_the_r3gan_preset_is_r3gans_augment_pipe_and_bgc_is_unchanged():
    """pipeline = "r3gan": R3GAN's train.py's AugmentPipe - blit + geom + color + cutout, the
    colour ops at half probability; a multiplier of the recipe overrides the preset's one op."""
    r3gan = AdaptiveAugment(AdaptiveAugment.Options(pipeline="r3gan")).pipeline
    assert r3gan.multipliers == R3GAN_AUGMENT and r3gan.ops == set(R3GAN_AUGMENT)
    assert r3gan.o.cutout_size == 0.5  # AugmentPipe's default, which R3GAN keeps
    bgc = AdaptiveAugment(AdaptiveAugment.Options()).pipeline
    assert bgc.multipliers == dict.fromkeys(GEOMETRIC + COLOUR, 1.0) and bgc.ops == set(GEOMETRIC + COLOUR)
    mine = AdaptiveAugment(AdaptiveAugment.Options(pipeline="r3gan", multipliers={"hue": 1.0, "cutout": 0})).pipeline
    assert mine.multipliers == {**R3GAN_AUGMENT, "hue": 1.0, "cutout": 0.0} and "cutout" not in mine.ops


def test_cutout_zeroes_a_rectangle_of_cutout_size_times_each_side_centred_on_the_draw():
    """p = 1: every sample gets a zero (mid-grey) rectangle, cutout_size of its width by
    cutout_size of its height (3 x 6 on 6 x 12 images at 0.5), clipped at the border; the draw
    after the cut's own is the centre (x, y), as AugmentPipe's."""
    x = torch.ones(64, 1, 6, 12, dtype=torch.float64)
    pipe = OfficialPipeline(("cutout",), OPTIONS, "cutout")
    torch.manual_seed(7)
    y = pipe(x, torch.tensor(1.0))
    torch.manual_seed(7)
    torch.rand(64)  # whether to cut: p = 1, all
    centre = torch.rand(64, 2)
    clipped = 0
    for k in range(64):
        rows, cols = torch.nonzero(y[k, 0] == 0, as_tuple=True)
        assert set(y[k].unique().tolist()) == {0.0, 1.0}
        assert rows.numel() == (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)  # a rectangle
        side = (rows.max() - rows.min() + 1, cols.max() - cols.min() + 1)
        if 0.25 < centre[k, 1] < 0.75 and 0.25 < centre[k, 0] < 0.75:  # away from the border: whole
            assert side == (3, 6), k
        assert side[0] <= 3 and side[1] <= 6, k  # nearer a border: clipped by it
        clipped += rows.numel() < 18
        assert abs((rows.float().mean() + 0.5) / 6 - centre[k, 1]) <= 0.25 + 1e-6
        assert abs((cols.float().mean() + 0.5) / 12 - centre[k, 0]) <= 0.25 + 1e-6
    assert 0 < clipped < 64
    big = OfficialPipeline(("cutout",), AdaptiveAugment.Options(pipeline="cutout", cutout_size=1.0), "cutout")
    torch.manual_seed(7)
    assert (big(x, torch.tensor(1.0)) == 0).float().mean() > 0.4  # the size option is used (0.5: at most 1/4)


def test_integer_translation_through_the_resampling_is_an_exact_reflected_shift():
    x = images(1, 1, 8, 8, seed=4)
    pipe = OfficialPipeline(("xint",), OPTIONS, "t")
    G = torch.tensor([[[1.0, 0, -1], [0, 1, 2], [0, 0, 1]]], dtype=torch.float64)  # content moves +1 in x, -2 in y
    y = pipe.resample(x, G, torch.ones(1, dtype=torch.bool))
    shifted = torch.nn.functional.pad(x, (1, 0, 0, 2), mode="reflect")[:, :, 2:, :8]
    torch.testing.assert_close(y, shifted, rtol=0, atol=TOL)


@pytest.mark.parametrize("p,mult", [(0.3, 1.0), (0.6, 0.5), (0.5, 2.5)])
def test_op_probabilities_are_the_reference_ones(p, mult):
    # Touched = the op's mask fired: probability p * multiplier per op (at most 1); each rotation
    # fires with p_rot = 1 - sqrt(1 - p * multiplier), so one of the two does with probability
    # p * multiplier. Binomial std at n = 4000, 0.3: 0.007; tolerance 0.03.
    n, expected, p = 4000, min(p * mult, 1.0), torch.tensor(p)
    for op in GEOMETRIC:
        pipe = OfficialPipeline((op,), OPTIONS, op, {op: mult})
        _, touched = pipe.geometric_matrix(torch.Size([n, 3, 8, 8]), "cpu", torch.float64, p.double())
        assert touched.float().mean().item() == pytest.approx(expected, abs=0.03), op
    for op in COLOUR:
        pipe = OfficialPipeline((op,), OPTIONS, op, {op: mult})
        _, touched = pipe.colour_matrix(n, 3, "cpu", torch.float64, p.double())
        assert touched.float().mean().item() == pytest.approx(expected, abs=0.03), op
    for band in range(4):  # each band on its own: p * multiplier * imgfilter_bands[band]
        bands = tuple(1.0 if b == band else 0.0 for b in range(4))
        pipe = OfficialPipeline(("imgfilter",), AdaptiveAugment.Options(imgfilter_bands=bands, pipeline="filter"),
                                "filter", {"imgfilter": mult})
        gains, touched = pipe.filter_gains(n, "cpu", torch.float64, p.double())
        assert touched.float().mean().item() == pytest.approx(expected, abs=0.03), band
        assert torch.equal(gains != 1, touched[:, None].expand(n, 4))  # renormalised: all four gains move
    x = torch.zeros(n, 1, 2, 2, dtype=torch.float64)
    noisy = OfficialPipeline(("noise",), OPTIONS, "noise", {"noise": mult}).add_noise(x, p.double(), torch.float64)
    assert (noisy != 0).flatten(1).any(1).float().mean().item() == pytest.approx(expected, abs=0.03)
    mask = OfficialPipeline(("cutout",), OPTIONS, "cutout", {"cutout": mult}).cutout_mask(n, 8, 8, "cpu", p)
    assert (mask == 0).flatten(1).any(1).float().mean().item() == pytest.approx(expected, abs=0.03)
    # When applied, xflip flips with probability 1/2 and rotate90 turns with probability 3/4.
    G, _ = OfficialPipeline(("xflip",), OPTIONS, "x").geometric_matrix(torch.Size([n, 1, 8, 8]), "cpu",
                                                                      torch.float64, torch.tensor(1.0, dtype=torch.float64))
    assert (G[:, 0, 0] < 0).float().mean().item() == pytest.approx(0.5, abs=0.03)
    G, _ = OfficialPipeline(("rotate90",), OPTIONS, "r").geometric_matrix(torch.Size([n, 1, 8, 8]), "cpu",
                                                                         torch.float64, torch.tensor(1.0, dtype=torch.float64))
    assert (G[:, 0, 0] < 0.5).float().mean().item() == pytest.approx(0.75, abs=0.03)


def test_p_follows_the_reference_rule():
    """stylegan2-ada-pytorch's training loop: every ada_interval iterations
    p <- max(p + sign(mean(sign(real logits)) - ada_target) * batch * ada_interval / (ada_kimg * 1000), 0),
    unbounded above. Replayed over an overfitting stretch (p passes 1), a recovering one (p
    reaches 0 and stays) and a noisy one."""
    target, interval, kimg, batch = 0.6, 4, 0.5, 16  # a step of 0.128
    aug = AdaptiveAugment(AdaptiveAugment.Options(target=target, interval=interval, kimg=kimg))
    g = torch.Generator().manual_seed(0)
    p_ref, signs, seen = 0.0, [], []
    for it in range(1, 161):
        bias = 2.0 if it <= 40 else (-2.0 if it <= 100 else 0.84)  # 0.84: E[sign] ~ 0.6, the target
        logits = torch.randn(batch, generator=g) + bias
        aug.feedback(logits)
        signs += torch.sign(logits).tolist()
        aug.end_step(it, batch)
        if it % interval == 0:
            adjust = np.sign(np.mean(signs) - target) * (batch * interval) / (kimg * 1000)
            p_ref, signs = max(p_ref + adjust, 0.0), []
        seen.append(p_ref)
        assert float(aug.p) == pytest.approx(p_ref, abs=1e-5), it
    assert max(seen) > 1.0 and 0.0 in seen[60:100]  # the run exercised both bounds of the rule
    assert len(set(seen[100:])) > 2  # and moved both ways near the target
    capped = AdaptiveAugment(AdaptiveAugment.Options(kimg=0.1, interval=1, p_max=0.8, p_init=0.75))
    capped.feedback(torch.ones(16))
    capped.end_step(1, 16)
    assert float(capped.p) == pytest.approx(0.8)  # p_max set: the old bound


@pytest.mark.parametrize("pipeline,c,side", [("bgc", 1, 4), ("bgc", 3, 4), ("r3gan", 1, 4), ("r3gan", 3, 4),
                                             ("filter", 1, 22), ("noise", 3, 4)])
def test_bgc_r3gan_filter_and_noise_pass_gradcheck(pipeline, c, side):
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline=pipeline, p_init=1.0))
    x = images(1, c, side, side, seed=6).requires_grad_()

    def f(t):
        torch.manual_seed(9)
        return aug(t)

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)
    if c == 1:  # R1 and the gradient penalty differentiate through it twice
        assert torch.autograd.gradgradcheck(f, (x,), eps=1e-6, atol=1e-6)


def test_gradients_flow_through_cutout_as_its_mask():
    """Cutout is a mask multiply: the gradient of sum(out) is 1 at the pixels kept and 0 at the
    cut ones, in every channel (gradcheck and gradgradcheck of 'r3gan', above, include it)."""
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline="cutout", p_init=1.0))
    x = images(6, 3, 8, 8, seed=12).requires_grad_()
    torch.manual_seed(3)
    y = aug(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    cut = y.detach() == 0
    assert cut.any() and (~cut).any() and torch.equal(cut, cut[:, :1].expand_as(cut))
    assert torch.equal(grad, (~cut).double())


@pytest.mark.parametrize("pipeline", ["bgc", "r3gan", "bgcfnc"])
def test_p_zero_is_the_identity_and_half_precision_and_autocast_work(pipeline):
    side = 24 if pipeline == "bgcfnc" else 8
    x = images(8, 3, side, side, seed=7, dtype=torch.float32)
    assert torch.equal(AdaptiveAugment(AdaptiveAugment.Options(pipeline=pipeline))(x), x)  # p_init 0: bit-exact
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline=pipeline, p_init=1.0))
    torch.manual_seed(1)
    plain = aug(x)
    torch.manual_seed(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = aug(x)
    assert cast.dtype == torch.float32 and torch.equal(cast, plain)  # resampled in float32 under autocast
    for dtype in (torch.bfloat16, torch.float16):
        torch.manual_seed(1)
        half = aug(x.to(dtype))
        assert half.dtype == dtype
        torch.testing.assert_close(half.float(), plain, rtol=0.02, atol=0.05)


def test_colour_ops_refuse_images_neither_rgb_nor_grey():
    aug = AdaptiveAugment(AdaptiveAugment.Options(p_init=1.0))
    with pytest.raises(GankitError) as e:
        aug(torch.zeros(2, 2, 8, 8))
    assert str(e.value) == ("augment.pipeline: the colour ops of pipeline 'bgc' need RGB or grey images (3 or 1 "
                            "channels), got 2 channels (use pipeline = \"bg\": the geometric ops only)")
    assert AdaptiveAugment(AdaptiveAugment.Options(pipeline="bg", p_init=1.0))(torch.zeros(2, 2, 8, 8)).shape[1] == 2


def test_the_filter_refuses_images_smaller_than_its_padding_in_one_line():
    """The filter reflect-pads by 21 pixels (half its 43 taps), as the reference, which fails
    below 22 pixels a side: refused with the fix; any channel count is filtered and noised."""
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline="bgcfnc", p_init=1.0))
    with pytest.raises(GankitError) as e:
        aug(torch.zeros(2, 3, 16, 16))
    assert str(e.value) == ("augment.pipeline: the imgfilter op of pipeline 'bgcfnc' reflect-pads the images by 21 pixels, "
                            "so it needs at least 22x22, got 16x16 (use pipeline = \"bgc\", or multipliers = "
                            "{imgfilter = 0})")
    assert aug(torch.zeros(2, 3, 22, 22)).shape == (2, 3, 22, 22)
    off = AdaptiveAugment(AdaptiveAugment.Options(pipeline="bgcfnc", p_init=1.0, multipliers={"imgfilter": 0}))
    assert off(torch.zeros(2, 3, 16, 16)).shape == (2, 3, 16, 16)
    y = AdaptiveAugment(AdaptiveAugment.Options(pipeline="filter", p_init=1.0))(images(2, 2, 22, 22))
    assert y.shape == (2, 2, 22, 22)


def test_old_ada_recipes_keep_their_meaning_or_get_one_line():
    problems = lambda **kw: list(AdaptiveAugment.problems(AdaptiveAugment.Options(**kw), None))  # noqa: E731
    assert problems() == [] and problems(pipeline="gankit-subset", transforms="xflip", translation_padding="wrap") == []
    assert problems(transforms="xflip,scale") == [("transforms", (
        "applies to pipeline = \"gankit-subset\" only (gankit 0.2's 'ada'); 'ada' now runs stylegan2-ada-pytorch's "
        "pipeline \"bgc\": add pipeline = \"gankit-subset\" to keep transforms = 'xflip,scale', or remove it"))]
    assert [k for k, _ in problems(translation_padding="wrap")] == ["translation_padding"]
    assert problems(pipeline="blit", hue_max=0.5) == [("hue_max", (
        "hue_max = 0.5 has no effect: pipeline \"blit\" has no hue (xflip, rotate90, xint); remove it or use pipeline = \"bgc\""))]
    assert problems(pipeline="gankit-subset", aniso_std=0.1) == [("aniso_std", (
        "aniso_std = 0.1 has no effect with pipeline = \"gankit-subset\" (it has no aniso); remove it or use pipeline = \"bgc\""))]
    with pytest.raises(GankitError, match=r"^augment\.pipeline: unknown pipeline 'bgcx' \(did you mean 'bgc'\?\); "
                                          r"available: blit, geom, color, filter, noise, cutout, bg, bgc, bgcf, bgcfn, "
                                          r"bgcfnc, r3gan, gankit-subset$"):
        AdaptiveAugment(AdaptiveAugment.Options(pipeline="bgcx"))


def test_a_recipe_with_the_old_transforms_key_is_refused_at_load(tmp_path):
    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    path = write_tiny_recipe(tmp_path)
    with pytest.raises(GankitError) as e:
        load_recipe(path, ["augment={name='ada', transforms='xflip'}"])
    assert "augment.transforms: applies to pipeline = \"gankit-subset\" only" in str(e.value)
    assert "\n" not in str(e.value)
    load_recipe(path, ["augment={name='ada', pipeline='gankit-subset', transforms='xflip'}"])


def test_multipliers_and_cutout_size_are_refused_in_one_line_where_they_would_do_nothing():
    problems = lambda **kw: list(AdaptiveAugment.problems(AdaptiveAugment.Options(**kw), None))  # noqa: E731
    every = ", ".join(OPS)
    assert problems(multipliers={"brightness": 0.5, "cutout": 0}, pipeline="r3gan") == []
    assert problems(multipliers={"brigthness": 0.5}) == [("multipliers.brigthness", (
        f"unknown op 'brigthness' (= 0.5) (did you mean 'brightness'?); available: {every}"))]
    assert problems(multipliers={"noise": 1.0}) == [("multipliers.noise", (
        "noise = 1 has no effect: pipeline \"bgc\" has no noise (" + ", ".join(GEOMETRIC + COLOUR) + "); remove it or use "
        "pipeline = \"bgcfn\""))]
    assert problems(pipeline="bgcfnc", multipliers={"imgfilter": 0.5, "noise": 0}, imgfilter_bands=(1, 0, 2, 0.5),
                    imgfilter_std=0.5, noise_std=0.3) == []
    assert problems(pipeline="bgc", imgfilter_std=0.5) == [("imgfilter_std", (
        "imgfilter_std = 0.5 has no effect: pipeline \"bgc\" has no imgfilter (" + ", ".join(GEOMETRIC + COLOUR)
        + "); remove it or use pipeline = \"bgcf\""))]
    assert [k for k, _ in problems(pipeline="bgcf", noise_std=0.2)] == ["noise_std"]
    with pytest.raises(GankitError, match=r"^augment\.imgfilter_bands: each must be >= 0, got \[1, -1, 1, 1\]$"):
        AdaptiveAugment(AdaptiveAugment.Options(pipeline="bgcf", imgfilter_bands=(1, -1, 1, 1)))
    assert problems(pipeline="bg", multipliers={"hue": 0.5}) == [("multipliers.hue", (
        "hue = 0.5 has no effect: pipeline \"bg\" has no hue (xflip, rotate90, xint, scale, rotate, aniso, xfrac); remove it "
        "or use pipeline = \"bgc\""))]
    assert problems(multipliers={"cutout": 1.0}) == [("multipliers.cutout", (
        "cutout = 1 has no effect: pipeline \"bgc\" has no cutout (" + ", ".join(GEOMETRIC + COLOUR) + "); remove it or use "
        "pipeline = \"r3gan\""))]
    assert problems(pipeline="r3gan", multipliers={"hue": -0.5}) == [("multipliers.hue", (
        "must be >= 0, got -0.5 (the op runs with probability p * -0.5; 0 turns it off)"))]
    assert problems(pipeline="gankit-subset", multipliers={"xflip": 0.5}) == [("multipliers", (
        "{xflip = 0.5} has no effect with pipeline = \"gankit-subset\" (its transforms all run with probability p); remove it or "
        "use pipeline = \"bgc\""))]
    assert problems(pipeline="geom", cutout_size=0.25) == [("cutout_size", (
        "cutout_size = 0.25 has no effect: pipeline \"geom\" has no cutout (scale, rotate, aniso, xfrac); remove it or use pipeline = "
        "\"r3gan\""))]
    assert [k for k, _ in problems(pipeline="gankit-subset", cutout_size=0.25)] == ["cutout_size"]
    with pytest.raises(GankitError, match=r"^augment\.cutout_size: must be in \[0, 1\], got 1\.5$"):
        AdaptiveAugment(AdaptiveAugment.Options(pipeline="r3gan", cutout_size=1.5))
    with pytest.raises(GankitError, match=r"^augment\.multipliers\.hue: must be >= 0"):
        AdaptiveAugment(AdaptiveAugment.Options(pipeline="r3gan", multipliers={"hue": float("nan")}))


@pytest.mark.parametrize("table,message", [
    ("{name='ada', pipeline='r3gan', multipliers={saturaton=0.5}}",
     "augment.multipliers.saturaton: unknown op 'saturaton' (= 0.5) (did you mean 'saturation'?); available: xflip,"),
    ("{name='ada', multipliers={cutout=1}}", "augment.multipliers.cutout: cutout = 1 has no effect: pipeline \"bgc\" has no cutout"),
    ("{name='ada', pipeline='r3gan', multipliers={hue='half'}}",
     "augment.multipliers.hue: expected float, got string \"half\""),
    ("{name='ada', pipeline='r3gan', multipliers={hue=-1}}", "augment.multipliers.hue: must be >= 0, got -1.0"),
])
def test_a_recipe_with_a_bad_multiplier_is_refused_at_load_in_one_line(tmp_path, table, message):
    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    path = write_tiny_recipe(tmp_path)
    with pytest.raises(GankitError) as e:
        load_recipe(path, [f"augment={table}"])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_recipe_sets_the_multipliers_and_the_cutout_size(tmp_path):
    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    recipe, _ = load_recipe(write_tiny_recipe(tmp_path), [
        "augment={name='ada', pipeline='r3gan', multipliers={hue=1, cutout=0.25}, cutout_size=0.25}"])
    assert recipe.augment.options.multipliers == {"hue": 1.0, "cutout": 0.25}
    pipe = AdaptiveAugment(recipe.augment.options).pipeline
    assert pipe.multipliers == {**R3GAN_AUGMENT, "hue": 1.0, "cutout": 0.25} and pipe.o.cutout_size == 0.25


@pytest.mark.parametrize("pipeline", ["bgc", "r3gan", "bgcfnc"])
def test_two_processes_augment_the_global_batch_as_one_process_does(monkeypatch, pipeline):
    """Under two processes (simulated here in one: torch.distributed's all-reduce replaced by the
    max over the two processes' values) each process draws for the global batch and keeps its
    slice (gan_kit.batch_rand), and pads by the global batch's margin. With strong shrinking
    (scale_std 1) the two halves alone need different margins, and would then differ by ~6e-5.
    In float64: in float32 a batch of 8 and one of 16 take different vector paths on some CPUs
    (AVX2 against AVX-512), which alone differ by up to 1e-5. 'r3gan' adds cutout's draws,
    'bgcfnc' the filter's and the noise's (its [N, C, H, W] noise sliced per process too)."""
    from gan_kit.base.randomness import sharded

    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline=pipeline, p_init=1.0, scale_std=1.0))
    x = images(16, 3, 32, 32, seed=8, dtype=torch.float64)
    local: dict[int, torch.Tensor] = {}

    def process(rank, final):
        def all_reduce(values, op=None):
            assert op == torch.distributed.ReduceOp.MAX
            if final:
                values.copy_(torch.maximum(local[0], local[1]))
            else:
                local[rank] = values.clone()

        monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
        monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
        torch.manual_seed(2)
        with sharded(rank, 2):
            return aug(x[rank::2])

    process(0, final=False), process(1, final=False)  # what each process needs alone
    two = torch.empty_like(x)
    two[0::2], two[1::2] = process(0, final=True), process(1, final=True)
    monkeypatch.undo()
    torch.manual_seed(2)
    one = aug(x)
    assert not torch.equal(local[0], local[1])
    torch.testing.assert_close(two, one, rtol=0, atol=1e-9)


def test_fixed_p_ada_keeps_p_init_whatever_the_logits_and_the_checkpoint():
    """target = none: ADA at a fixed p (the paper's fixed-p baselines; R3GAN's augmentation),
    where the adaptive rule would have moved it."""
    fixed = AdaptiveAugment(AdaptiveAugment.Options(target=None, p_init=0.3, interval=1, kimg=0.1))
    adaptive = AdaptiveAugment(AdaptiveAugment.Options(p_init=0.3, interval=1, kimg=0.1))
    for it in range(1, 9):
        for aug in (fixed, adaptive):
            aug.feedback(torch.full((16,), 5.0))  # r_t = 1: overfitting
            stats = aug.end_step(it, 16)
    assert float(fixed.p) == pytest.approx(0.3) and set(stats) == {"Augment/p", "Augment/rt"}
    assert float(adaptive.p) > 1.0
    assert set(fixed.end_step(9, 16)) == {"Augment/p"}
    fixed.load_state_dict(adaptive.state_dict())  # a checkpoint of an adaptive run, resumed at fixed p
    assert float(fixed.p) == pytest.approx(0.3)
    x = images(64, 1, 8, 8, dtype=torch.float32)
    assert not torch.allclose(fixed(x), x, atol=1e-4)  # p = 0.3 augments
