"""ADA's full pipeline as the paper runs it: every op of stylegan2-ada-pytorch's
'bgc' (and its presets) equals the reference's formulas on the same draws, the ops are applied
with the reference's probabilities, p moves by the reference's rule, and old 'ada' recipes either
keep their meaning or get a one-line error.

The reference here is written from the paper (arXiv:2006.06676, appendix B) and
stylegan2-ada-pytorch's ``training/augment.py`` / ``training/training_loop.py``, independently of
gankit's code: the draws are replayed from torch's RNG in the reference's order, every matrix is
built entry by entry in float64 NumPy, the upsampling is ``scipy.signal.upfirdn``, the bilinear
sampler and the downsampling are explicit loops over taps, and the hue rotation is SciPy's
rotation about the luma axis. Tolerance: 1e-9 in float64 (the identity resampling the reference
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
from gan_kit.builtin.augment.ada_pipeline import COLOUR, GEOMETRIC, PRESETS, SYM6, OfficialPipeline

OPTIONS = AdaptiveAugment.Options()  # the official ranges
TOL = 1e-9


def images(n, c, h, w, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, c, h, w, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)


# ----------------------------------------------------------------- the float64 reference --


def eye(n, k):
    return np.tile(np.eye(k), (n, 1, 1))


def reference_matrices(ops, n, c, p, o=OPTIONS, h=None, w=None):
    """Replay AugmentPipe's draws (torch's global RNG, float32, in its order) and build G_inv
    [n,3,3] (output pixel -> input pixel) and C [n,4,4] in float64, entry by entry."""
    rand = lambda *s: torch.rand(n, *s).double().numpy().reshape(n, -1)  # noqa: E731
    randn = lambda *s: torch.randn(n, *s).double().numpy().reshape(n, -1)  # noqa: E731

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
        i = np.where(rand()[:, 0] < p, i, 0)
        G = G @ np.linalg.inv(scale(1 - 2 * i, np.ones(n)))
    if "rotate90" in ops:
        i = np.floor(rand()[:, 0] * 4)
        i = np.where(rand()[:, 0] < p, i, 0)
        G = G @ np.linalg.inv(rotate(-np.pi / 2 * i))
    if "xint" in ops:
        t = (rand(2) * 2 - 1) * o.translate_ratio
        t = np.where(rand(1) < p, t, 0)
        G = G @ np.linalg.inv(translate(np.round(t[:, 0] * w), np.round(t[:, 1] * h)))
    if "scale" in ops:
        s = np.exp2(randn()[:, 0] * o.scale_std)
        s = np.where(rand()[:, 0] < p, s, 1)
        G = G @ np.linalg.inv(scale(s, s))
    p_rot = 1 - math.sqrt(min(max(1 - p, 0), 1))
    if "rotate" in ops:
        t = (rand()[:, 0] * 2 - 1) * np.pi * o.rotate_max
        t = np.where(rand()[:, 0] < p_rot, t, 0)
        G = G @ np.linalg.inv(rotate(-t))
    if "aniso" in ops:
        s = np.exp2(randn()[:, 0] * o.aniso_std)
        s = np.where(rand()[:, 0] < p, s, 1)
        G = G @ np.linalg.inv(scale(s, 1 / s))
    if "rotate" in ops:
        t = (rand()[:, 0] * 2 - 1) * np.pi * o.rotate_max
        t = np.where(rand()[:, 0] < p_rot, t, 0)
        G = G @ np.linalg.inv(rotate(-t))
    if "xfrac" in ops:
        t = randn(2) * o.xfrac_std
        t = np.where(rand(1) < p, t, 0)
        G = G @ np.linalg.inv(translate(t[:, 0] * w, t[:, 1] * h))

    C = eye(n, 4)
    v = np.array([1.0, 1.0, 1.0, 0.0]) / np.sqrt(3)
    vv = np.outer(v, v)
    if "brightness" in ops:
        b = randn()[:, 0] * o.brightness_std
        b = np.where(rand()[:, 0] < p, b, 0)
        m = eye(n, 4)
        m[:, :3, 3] = b[:, None]
        C = m @ C
    if "contrast" in ops:
        k = np.exp2(randn()[:, 0] * o.contrast_std)
        k = np.where(rand()[:, 0] < p, k, 1)
        C = np.stack([np.diag([kk, kk, kk, 1.0]) for kk in k]) @ C
    if "lumaflip" in ops:
        i = np.floor(rand()[:, 0] * 2)
        i = np.where(rand()[:, 0] < p, i, 0)
        C = (np.eye(4) - 2 * vv * i[:, None, None]) @ C  # Householder reflection of the luma axis
    if "hue" in ops and c > 1:
        t = (rand()[:, 0] * 2 - 1) * np.pi * o.hue_max
        t = np.where(rand()[:, 0] < p, t, 0)
        m = eye(n, 4)
        m[:, :3, :3] = Rotation.from_rotvec(t[:, None] * v[None, :3]).as_matrix()
        C = m @ C
    if "saturation" in ops and c > 1:
        s = np.exp2(randn()[:, 0] * o.saturation_std)
        s = np.where(rand()[:, 0] < p, s, 1)
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


def reference_colour(x, C):
    n, c, h, w = x.shape
    x = x.reshape(n, c, h * w)
    if c == 3:
        y = np.einsum("nij,njp->nip", C[:, :3, :3], x) + C[:, :3, 3:]
    else:
        row = C[:, :3, :].mean(axis=1)  # grey: the mean of the three colour rows
        y = x * row[:, :3].sum(axis=1)[:, None, None] + row[:, 3][:, None, None]
    return y.reshape(n, c, h, w)


def reference(ops, x, p):
    """The reference's output for ``x`` (torch, float64) from torch's current RNG state."""
    n, c, h, w = x.shape
    G, C = reference_matrices(ops, n, c, p, h=h, w=w)
    y = x.numpy()
    if any(op in ops for op in GEOMETRIC):
        y = reference_resample(y, G)
    if any(op in ops for op in COLOUR):
        y = reference_colour(y, C)
    return torch.from_numpy(np.ascontiguousarray(y)), G


def ours(ops, x, p):
    pipe = OfficialPipeline(tuple(ops), OPTIONS, "test")
    return pipe(x, torch.tensor(p))


# --------------------------------------------------------------------------- the tests --


def test_sym6_is_the_orthonormal_wavelet_low_pass():
    f = np.array(SYM6)
    assert np.sum(f) == pytest.approx(math.sqrt(2), abs=1e-12) and np.sum(f * f) == pytest.approx(1, abs=1e-11)
    for shift in range(1, 6):  # orthogonal to its even shifts: up then down is the identity
        assert abs(np.dot(f[:-2 * shift], f[2 * shift:])) < 1e-11


CASES = [(op, 3, 8, 12) for op in GEOMETRIC + COLOUR] + [(op, 1, 8, 8) for op in GEOMETRIC + COLOUR]
CASES += [(name, c, 8, 12) for name in PRESETS for c in (1, 3)]


@pytest.mark.parametrize("op,c,h,w", CASES, ids=[f"{o}-c{c}-{h}x{w}" for o, c, h, w in CASES])
def test_every_op_equals_the_reference_on_the_same_draws(op, c, h, w):
    ops = PRESETS.get(op, (op,))
    x = images(12, c, h, w, seed=1)
    torch.manual_seed(3)
    y = ours(ops, x, 0.5)
    after = torch.rand(1)
    torch.manual_seed(3)
    expected, G = reference(ops, x, 0.5)
    assert torch.equal(torch.rand(1), after)  # the same number of draws, in the same order
    torch.testing.assert_close(y, expected, rtol=0, atol=TOL)
    changed = (y - x).flatten(1).abs().amax(1) > 1e-6
    if op in ("hue", "saturation") and c == 1:
        assert torch.equal(y, x)  # no chroma to turn or scale: skipped, as the reference does
    elif op in PRESETS:
        assert changed.any()
    else:
        assert changed.any() and not changed.all()  # p = 0.5: some samples transformed, some not


@pytest.mark.parametrize("side,p", [(4, 1.0), (16, 1.25)])
def test_bgc_equals_the_reference_on_tiny_images_and_p_above_one(side, p):
    x = images(8, 3, side, side, seed=2)
    torch.manual_seed(5)
    y = ours(PRESETS["bgc"], x, p)
    torch.manual_seed(5)
    torch.testing.assert_close(y, reference(PRESETS["bgc"], x, p)[0], rtol=0, atol=TOL)
    assert ((y - x).flatten(1).abs().amax(1) > 1e-3).all()  # p >= 1: every sample transformed


def test_integer_translation_through_the_resampling_is_an_exact_reflected_shift():
    x = images(1, 1, 8, 8, seed=4)
    pipe = OfficialPipeline(("xint",), OPTIONS, "t")
    G = torch.tensor([[[1.0, 0, -1], [0, 1, 2], [0, 0, 1]]], dtype=torch.float64)  # content moves +1 in x, -2 in y
    y = pipe.resample(x, G, torch.ones(1, dtype=torch.bool))
    shifted = torch.nn.functional.pad(x, (1, 0, 0, 2), mode="reflect")[:, :, 2:, :8]
    torch.testing.assert_close(y, shifted, rtol=0, atol=TOL)


def test_op_probabilities_are_the_reference_ones():
    # Touched = the op's mask fired: probability p per op; each rotation fires with
    # p_rot = 1 - sqrt(1 - p), so one of the two does with probability p. Binomial std at
    # n = 4000, p = 0.3: 0.007; tolerance 0.03.
    n, p = 4000, torch.tensor(0.3)
    for op in GEOMETRIC:
        _, touched = OfficialPipeline((op,), OPTIONS, op).geometric_matrix(torch.Size([n, 3, 8, 8]), "cpu",
                                                                           torch.float64, p.double())
        assert touched.float().mean().item() == pytest.approx(0.3, abs=0.03), op
    for op in COLOUR:
        _, touched = OfficialPipeline((op,), OPTIONS, op).colour_matrix(n, 3, "cpu", torch.float64, p.double())
        assert touched.float().mean().item() == pytest.approx(0.3, abs=0.03), op
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


@pytest.mark.parametrize("c", [1, 3])
def test_bgc_passes_gradcheck(c):
    aug = AdaptiveAugment(AdaptiveAugment.Options(p_init=1.0))
    x = images(1, c, 4, 4, seed=6).requires_grad_()

    def f(t):
        torch.manual_seed(9)
        return aug(t)

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)
    if c == 1:  # R1 and the gradient penalty differentiate through it twice
        assert torch.autograd.gradgradcheck(f, (x,), eps=1e-6, atol=1e-6)


def test_p_zero_is_the_identity_and_half_precision_and_autocast_work():
    x = images(8, 3, 8, 8, seed=7, dtype=torch.float32)
    assert torch.equal(AdaptiveAugment(AdaptiveAugment.Options())(x), x)  # p_init 0: bit-exact
    aug = AdaptiveAugment(AdaptiveAugment.Options(p_init=1.0))
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


def test_old_ada_recipes_keep_their_meaning_or_get_one_line():
    problems = lambda **kw: list(AdaptiveAugment.problems(AdaptiveAugment.Options(**kw), None))  # noqa: E731
    assert problems() == [] and problems(pipeline="gankit-subset", transforms="xflip", translation_padding="wrap") == []
    assert problems(transforms="xflip,scale") == [("transforms", (
        "applies to pipeline = \"gankit-subset\" only (gankit 0.2's 'ada'); 'ada' now runs stylegan2-ada-pytorch's "
        "pipeline \"bgc\": add pipeline = \"gankit-subset\" to keep transforms = 'xflip,scale', or remove it"))]
    assert [k for k, _ in problems(translation_padding="wrap")] == ["translation_padding"]
    assert problems(pipeline="blit", hue_max=0.5) == [("hue_max", (
        "has no effect: pipeline \"blit\" has no hue (xflip, rotate90, xint); remove it or use pipeline = \"bgc\""))]
    assert problems(pipeline="gankit-subset", aniso_std=0.1) == [("aniso_std", (
        "has no effect with pipeline = \"gankit-subset\" (it has no aniso); remove it or use pipeline = \"bgc\""))]
    with pytest.raises(GankitError, match=r"^augment\.pipeline: unknown pipeline 'bgcc' \(did you mean 'bgc'\?\); "
                                          r"available: blit, geom, color, bg, bgc, gankit-subset$"):
        AdaptiveAugment(AdaptiveAugment.Options(pipeline="bgcc"))
    with pytest.raises(GankitError, match=r"^augment\.pipeline: stylegan2-ada-pytorch's pipeline 'bgcf' needs its "
                                          r"filter, noise or cutout ops, which gankit does not implement; available"):
        AdaptiveAugment(AdaptiveAugment.Options(pipeline="bgcf"))


def test_a_recipe_with_the_old_transforms_key_is_refused_at_load(tmp_path):
    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    path = write_tiny_recipe(tmp_path)
    with pytest.raises(GankitError) as e:
        load_recipe(path, ["augment={name='ada', transforms='xflip'}"])
    assert "augment.transforms: applies to pipeline = \"gankit-subset\" only" in str(e.value)
    assert "\n" not in str(e.value)
    load_recipe(path, ["augment={name='ada', pipeline='gankit-subset', transforms='xflip'}"])



def test_two_processes_augment_the_global_batch_as_one_process_does(monkeypatch):
    """Under two processes (simulated here in one: torch.distributed's all-reduce replaced by the
    max over the two processes' values) each process draws for the global batch and keeps its
    slice (gan_kit.batch_rand), and pads by the global batch's margin. With strong shrinking
    (scale_std 1) the two halves alone need different margins, and would then differ by ~6e-5.
    In float64: in float32 a batch of 8 and one of 16 take different vector paths on some CPUs
    (AVX2 against AVX-512), which alone differ by up to 1e-5."""
    from gan_kit.base.randomness import sharded

    aug = AdaptiveAugment(AdaptiveAugment.Options(p_init=1.0, scale_std=1.0))
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
