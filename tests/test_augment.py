"""Augmentation of D's inputs: DiffAugment and ADA are differentiable, draw afresh per
call and per sample, ADA's p follows the overfitting heuristic by the paper's step and resumes
exactly, and bad options are one-line errors."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

from gan_kit import GankitError
from gan_kit.builtin.augment.ada import AdaptiveAugment
from gan_kit.builtin.augment.ada import register_augmentations as register_ada
from gan_kit.builtin.augment.ada_subset import ADA_TRANSFORMS
from gan_kit.builtin.augment import DiffAugment, register_augmentations


def diffaugment(policy="color,translation,cutout", **kw):
    return DiffAugment(DiffAugment.Options(policy=policy, **kw))


def ada(transforms=",".join(ADA_TRANSFORMS), p=1.0, **kw):
    """gankit 0.2's ADA pipeline (``pipeline = "gankit-subset"``; the full one: tests/test_ada.py)."""
    return AdaptiveAugment(AdaptiveAugment.Options(pipeline="gankit-subset", transforms=transforms, p_init=p, **kw))


def seeded(aug, seed=1):
    """``aug`` with its random draw fixed: the same draw on every call (for gradcheck and jacobians)."""

    def f(x):
        torch.manual_seed(seed)
        return aug(x)

    return f


def images(n=2, c=3, side=8, dtype=torch.float32):
    return (torch.rand(n, c, side, side) * 2 - 1).to(dtype)


# ---- (a) gradients reach the input through every transform

SMOOTH = [
    ("diffaugment color", lambda: diffaugment("color"), 3),
    ("ada scale", lambda: ada("scale"), 1),
    ("ada scale rgb", lambda: ada("scale"), 3),
    ("ada brightness", lambda: ada("brightness"), 3),
    ("ada contrast", lambda: ada("contrast"), 3),
    ("ada saturation", lambda: ada("saturation"), 3),
]


@pytest.mark.parametrize("label,make,channels", SMOOTH, ids=[s[0] for s in SMOOTH])
def test_smooth_transforms_pass_gradcheck(label, make, channels):
    x = images(2, channels, 4, torch.float64).requires_grad_()
    f = seeded(make())
    assert not torch.equal(f(x), x)  # the draw does transform the input
    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)


PERMUTATIONS = [
    ("diffaugment translation", lambda: diffaugment("translation", translation_ratio=0.25)),
    ("diffaugment cutout", lambda: diffaugment("cutout")),
    ("ada xflip", lambda: ada("xflip")),
    ("ada rotate90", lambda: ada("rotate90")),
    ("ada translation reflect", lambda: ada("translation", translate_ratio=0.25)),
    ("ada translation wrap", lambda: ada("translation", translate_ratio=0.25, translation_padding="wrap")),
]


@pytest.mark.parametrize("label,make", PERMUTATIONS, ids=[p[0] for p in PERMUTATIONS])
def test_gradient_of_linear_transforms_is_the_transform_of_one_hots(label, make):
    # For a fixed draw these are linear maps y = A x (a selection of pixels, or a mask): the
    # autograd Jacobian must equal A, whose column j is the transform applied to one-hot e_j.
    shape = (3, 1, 4, 4)
    f = seeded(make(), seed=3)
    x = torch.rand(shape)
    jac = torch.autograd.functional.jacobian(lambda t: f(t).flatten(), x).reshape(x.numel(), x.numel())
    eye = torch.eye(x.numel())
    columns = torch.stack([f(eye[j].reshape(shape)).flatten() for j in range(x.numel())], dim=1)
    assert torch.equal(jac, columns)
    assert not torch.equal(jac, eye)  # this draw is not the identity


def test_whole_pipelines_pass_gradcheck():
    x = images(1, 3, 4, torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(seeded(diffaugment(translation_ratio=0.25)), (x,), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(seeded(ada(translate_ratio=0.25)), (x,), eps=1e-6, atol=1e-6)


# ---- the formulas


@pytest.mark.parametrize("channels", [1, 3])
def test_diffaugment_color_is_brightness_saturation_contrast(channels):
    x = images(4, channels, 4)
    torch.manual_seed(5)
    out = diffaugment("color")(x)
    torch.manual_seed(5)
    b = (torch.rand(4) - 0.5).view(-1, 1, 1, 1)
    s = (torch.rand(4) * 2).view(-1, 1, 1, 1)
    k = (torch.rand(4) + 0.5).view(-1, 1, 1, 1)
    y = x + b
    y = y.mean(1, keepdim=True) + (y - y.mean(1, keepdim=True)) * s  # the identity for one channel
    y = y.mean((1, 2, 3), keepdim=True) + (y - y.mean((1, 2, 3), keepdim=True)) * k
    assert torch.allclose(out, y, atol=1e-6)


def test_diffaugment_translation_shifts_in_zeros():
    x = torch.ones(16, 1, 8, 8)
    out = diffaugment("translation")(x)  # shifts of up to round(8 / 8) = 1 pixel
    assert set(out.unique().tolist()) <= {0.0, 1.0}
    rows = (out[:, 0] == 0).all(dim=2).sum(1)  # rows filled by the shift
    cols = (out[:, 0] == 0).all(dim=1).sum(1)
    assert rows.max() == 1 and cols.max() == 1
    assert ((out == 0).flatten(1).sum(1) == 8 * rows + 8 * cols - rows * cols).all()


def test_diffaugment_cutout_zeroes_one_clipped_square():
    x = torch.ones(32, 1, 8, 8)
    out = diffaugment("cutout")(x)[:, 0]  # side round(8 / 2) = 4, centred on a random pixel
    for mask in out == 0:
        rows, cols = mask.any(1), mask.any(0)
        assert torch.equal(mask, rows[:, None] & cols[None, :])  # one axis-aligned rectangle
        assert 2 <= rows.sum() <= 4 and 2 <= cols.sum() <= 4  # the square, clipped by half at most
    sizes = (out == 0).flatten(1).sum(1)
    assert (sizes == 16).any() and (sizes < 16).any()


@pytest.mark.parametrize("padding", ["reflect", "wrap"])
def test_ada_translation_is_an_integer_shift_with_reflect_or_wrap(padding):
    x = torch.arange(64.0).reshape(1, 1, 8, 8).repeat(8, 1, 1, 1)  # distinct pixel values
    out = ada("translation", translation_padding=padding)(x)
    padded = F.pad(x[:1], (1, 1, 1, 1), mode="reflect" if padding == "reflect" else "circular")
    shifts = set()
    for sample in out:
        found = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                 if torch.equal(sample[0], padded[0, 0, 1 - dy:9 - dy, 1 - dx:9 - dx])]
        assert len(found) == 1
        shifts.add(found[0])
    assert len(shifts) > 1


def test_ada_scale_uses_reflection_padding_and_resamples():
    constant = torch.full((16, 1, 8, 8), 0.7)
    # A zero-filled border would darken the shrunk samples; reflection keeps a constant image.
    assert torch.allclose(ada("scale")(constant), constant, atol=1e-6)
    x = images(16, 1, 8)
    assert not torch.equal(ada("scale")(x), x)


def test_ada_saturation_is_a_no_op_on_grey_images():
    x = images(8, 1, 8)
    assert torch.equal(ada("saturation")(x), x)
    rgb = images(8, 3, 8)
    assert not torch.equal(ada("saturation")(rgb), rgb)


# ---- (b) fresh draws per call and per sample

EVERY_TRANSFORM = [
    *[(f"diffaugment {p}", (lambda p=p: diffaugment(p))) for p in ("color", "translation", "cutout")],
    ("diffaugment all", lambda: diffaugment()),
    *[(f"ada {t}", (lambda t=t: ada(t))) for t in ADA_TRANSFORMS],
    ("ada all", lambda: ada()),
]


@pytest.mark.parametrize("label,make", EVERY_TRANSFORM, ids=[e[0] for e in EVERY_TRANSFORM])
def test_each_call_and_each_sample_draws_afresh(label, make):
    aug = make()
    x = images(1, 3, 8).repeat(16, 1, 1, 1)  # sixteen copies of one image
    first, second = aug(x), aug(x)
    assert not torch.equal(first, second)  # the reals and the fakes of a step never share a draw
    assert not all(torch.equal(first[0], s) for s in first[1:])  # every sample has its own draw


# ---- (c) ADA's probability p


def test_ada_with_p_zero_is_the_identity():
    x = images(16, 3, 8)
    assert torch.equal(ada(p=0.0)(x), x)
    assert torch.equal(ada(p=0.0)(x.bfloat16()), x.bfloat16())


def test_ada_with_p_one_changes_every_sample():
    x = images(16, 3, 8)
    out = ada(p=1.0)(x)
    assert ((out - x).flatten(1).abs().amax(1) > 1e-3).all()


def test_ada_applies_each_transform_with_probability_p():
    x = torch.zeros(4000, 1, 1, 1)
    changed = (ada("brightness", p=0.3)(x) != 0).float().mean().item()
    assert changed == pytest.approx(0.3, abs=0.03)  # binomial std 0.007


# ---- (d) adaptation of p


def run_feedback(aug, sign, iterations, batch=16):
    """Iterations of one D objective each, D's logits on the reals all of ``sign``; returns the stats."""
    stats = []
    for step in range(1, iterations + 1):
        aug.feedback(sign * torch.rand(batch) + sign * 0.1)
        stats.append(aug.end_step(step, batch))
    return stats


def test_ada_p_rises_by_the_step_when_d_overfits():
    aug = ada(kimg=1.0, interval=4)  # step = 16 * 4 / 1000 = 0.064
    aug.p = torch.tensor(0.0)
    stats = run_feedback(aug, +1.0, 8)
    assert [float(s["Augment/p"]) for s in stats[:3]] == [0.0] * 3 and "Augment/rt" not in stats[0]
    assert float(stats[3]["Augment/rt"]) == 1.0
    assert float(stats[3]["Augment/p"]) == pytest.approx(0.064, rel=1e-6)
    assert float(stats[7]["Augment/p"]) == pytest.approx(0.128, rel=1e-6)


def test_ada_p_falls_and_stops_at_zero_when_d_does_not_overfit():
    aug = ada(p=0.1, kimg=1.0, interval=4)
    stats = run_feedback(aug, -1.0, 12)
    assert float(stats[3]["Augment/rt"]) == -1.0
    assert float(stats[3]["Augment/p"]) == pytest.approx(0.1 - 0.064, rel=1e-6)
    assert float(stats[7]["Augment/p"]) == 0.0 and float(stats[11]["Augment/p"]) == 0.0


def test_ada_p_is_clamped_at_p_max_and_holds_at_the_target():
    aug = ada(p=0.75, p_max=0.8, kimg=0.1, interval=1)  # step 0.16
    run_feedback(aug, +1.0, 3)
    assert float(aug.p) == pytest.approx(0.8)
    held = ada(p=0.5, target=0.0, kimg=1.0, interval=2)
    for step in (1, 2):  # half the logits positive: r_t = 0 = target, sign 0, p unchanged
        held.feedback(torch.tensor([1.0, -1.0, 2.0, -2.0]))
        out = held.end_step(step, 4)
    assert float(out["Augment/rt"]) == 0.0 and float(held.p) == 0.5


def test_ada_r_t_averages_every_d_objective_of_the_interval():
    aug = ada(p=0.5, kimg=1.0, interval=2, target=0.6)
    aug.feedback(torch.tensor([1.0, 1.0, 1.0, -1.0]))  # two D objectives in iteration 1 (d_steps = 2)
    aug.feedback(torch.tensor([1.0, 1.0, 1.0, 1.0]))
    aug.end_step(1, 4)
    aug.feedback(torch.tensor([-1.0, -1.0, 1.0, 1.0]))
    out = aug.end_step(2, 4)
    assert float(out["Augment/rt"]) == pytest.approx((2 + 4 + 0) / 12)  # 0.5 < 0.6: p falls
    assert float(out["Augment/p"]) == pytest.approx(0.5 - 4 * 2 / 1000)


def test_ada_feedback_keeps_tensors_and_an_empty_interval_keeps_p():
    aug = ada(p=0.5, kimg=1.0, interval=1)
    aug.feedback(torch.ones(4))
    assert isinstance(aug.adaptive.sign_sum, torch.Tensor) and isinstance(aug.adaptive.sign_count, torch.Tensor)
    aug.end_step(1, 4)
    out = aug.end_step(2, 4)  # no D objective in this interval: no measurement, no change
    assert float(out["Augment/p"]) == pytest.approx(0.504) and torch.isfinite(out["Augment/rt"])


# ---- (e) exact resume


def test_ada_state_dict_round_trip_resumes_bit_identically():
    aug = ada(p=0.4, kimg=0.5, interval=4)
    x = images(8, 3, 8)
    run_feedback(aug, +1.0, 6)  # mid-interval: the accumulators hold two iterations
    buffer = io.BytesIO()
    torch.save({"augment": aug.state_dict(), "rng": torch.get_rng_state()}, buffer)

    def go_on(a):
        outs = []
        for step in range(7, 13):
            outs.append(a(x))
            a.feedback(torch.randn(8))
            a.end_step(step, 8)
        return outs, float(a.p)

    outs, p = go_on(aug)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = ada(p=0.0, kimg=0.5, interval=4)
    resumed.load_state_dict(saved["augment"])
    torch.set_rng_state(saved["rng"])
    outs2, p2 = go_on(resumed)
    assert p2 == p and p != 0.4
    assert all(torch.equal(a, b) for a, b in zip(outs, outs2))


def test_load_state_dict_refuses_foreign_state():
    with pytest.raises(GankitError, match="lacks p, sign_sum, sign_count"):
        ada().load_state_dict({})
    with pytest.raises(GankitError, match="'diffaugment' does not have"):
        diffaugment().load_state_dict({"p": 0.3})
    assert diffaugment().state_dict() == {} and diffaugment().end_step(4, 16) == {}


# ---- (f) option problems


def test_diffaugment_policy_problems_name_the_item_and_a_fix():
    problems = list(DiffAugment.problems(DiffAugment.Options(policy="colour, translation,cutout,cutout"), None))
    assert problems == [
        ("policy", "unknown policy 'colour' in 'colour, translation,cutout,cutout' (did you mean 'color'?); "
                   "available: color, cutout, translation"),
        ("policy", "policy 'cutout' is listed twice in 'colour, translation,cutout,cutout' (list each once)"),
    ]
    assert "is empty" in list(DiffAugment.problems(DiffAugment.Options(policy=" , "), None))[0][1]
    assert list(DiffAugment.problems(DiffAugment.Options(), None)) == []
    with pytest.raises(GankitError) as e:
        diffaugment("color,translaton")
    assert str(e.value) == ("augment.policy: unknown policy 'translaton' in 'color,translaton' "
                            "(did you mean 'translation'?); available: color, cutout, translation")


def test_ada_option_problems():
    assert list(AdaptiveAugment.problems(AdaptiveAugment.Options(pipeline="gankit-subset", transforms="xflip,rotat90"),
                                         None)) == [
        ("transforms", "unknown transform 'rotat90' in 'xflip,rotat90' (did you mean 'rotate90'?); available: "
                       "brightness, contrast, rotate90, saturation, scale, translation, xflip")]
    assert list(AdaptiveAugment.problems(AdaptiveAugment.Options(p_init=0.9, p_max=0.8), None)) == [
        ("p_init", "p_init = 0.9 is above p_max = 0.8 (lower p_init or raise p_max)")]
    with pytest.raises(GankitError, match=r"^augment\.kimg: must be > 0, got 0\.0$"):
        ada(kimg=0.0)
    with pytest.raises(GankitError, match="needs square images, got 8x4"):
        ada("rotate90")(torch.zeros(2, 1, 8, 4))


# ---- (g) shapes, dtypes and ranges


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("side", [8, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make", [diffaugment, ada], ids=["diffaugment", "ada"])
def test_shape_dtype_and_range(make, dtype, side, channels):
    x = images(4, channels, side, dtype)
    out = make()(x)
    assert out.shape == x.shape and out.dtype == dtype
    assert torch.isfinite(out.float()).all()
    # Colour changes move pixels out of [-1, 1], but not far: |x| stays well within 10.
    assert out.float().abs().max() < 10
    assert not torch.equal(out, x)


def test_register_augmentations_registers_both_and_none():
    from gan_kit.builtin.augment import NoAugment

    seen = {}
    register_augmentations(lambda name, cls: seen.__setitem__(name, cls))
    register_ada(lambda name, cls: seen.__setitem__(name, cls))
    assert seen == {"none": NoAugment, "diffaugment": DiffAugment, "ada": AdaptiveAugment}
    x = torch.randn(2, 1, 4, 4)
    assert NoAugment()(x) is x
