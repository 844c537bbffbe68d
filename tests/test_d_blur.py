"""D's fading input blur (StyleGAN3-R; the StyleGAN3 repository's training/loss.py ``run_D``):
the filter against a hand computation of its definition, D's forward, and the schedule that fades
sigma, as the recipe and the paper's settings write it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gan_kit.builtin.architectures.stylegan2 import Discriminator
from gan_kit.builtin.architectures.stylegan2.d_blur import blur_images, blur_taps
from gan_kit.recipe import load_recipe
from gan_kit.runs.run import build_run

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "stylegan3.toml"


def hand_taps(sigma: float) -> list[float]:
    """The paper's code's filter by hand: floor(3 sigma) taps each side, 2 ** -(i / sigma) ** 2,
    normalised to sum 1 (Python floats)."""
    k = math.floor(3 * sigma)
    raw = [2.0 ** -((i / sigma) ** 2) for i in range(-k, k + 1)]
    return [v / sum(raw) for v in raw]


def hand_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """The separable filter as one 2-D sum over the zero-extended image, in float64, pixel by pixel."""
    taps = hand_taps(sigma)
    k = (len(taps) - 1) // 2
    n, c, h, w = x.shape
    out = torch.zeros(n, c, h, w, dtype=torch.float64)
    xd = x.double()
    for y in range(h):
        for xx in range(w):
            acc = torch.zeros(n, c, dtype=torch.float64)
            for dy in range(-k, k + 1):
                for dx in range(-k, k + 1):
                    if 0 <= y + dy < h and 0 <= xx + dx < w:
                        acc += taps[dy + k] * taps[dx + k] * xd[:, :, y + dy, xx + dx]
            out[:, :, y, xx] = acc
    return out


@pytest.mark.parametrize("sigma, size", [(1.0, 7), (0.9, 5), (0.625, 3), (2.5, 15), (10.0, 61)])
def test_the_filter_has_2_floor_3_sigma_plus_1_exp2_taps(sigma, size):
    """floor, not ceil or round: 0.9 -> 5 taps (ceil: 7), 0.625 -> 3 (round: 5); base 2, not e."""
    f = blur_taps(sigma)
    assert f.dtype == torch.float32 and f.numel() == size
    assert f.tolist() == pytest.approx(hand_taps(sigma), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("sigma", [0.0, 0.1, 0.33])
def test_below_a_third_of_a_pixel_there_is_no_blur(sigma):
    x = torch.randn(2, 1, 8, 8)
    assert blur_taps(sigma) is None and blur_images(x, sigma) is x


def test_blur_taps_refuses_a_negative_sigma():
    with pytest.raises(ValueError, match="sigma must be"):
        blur_taps(-1.0)


@pytest.mark.parametrize("sigma", [0.625, 0.9, 2.5, 10.0])
def test_the_blur_is_the_hand_computed_zero_padded_2d_filter(sigma):
    """Same size out; the borders see zeros outside the image (the official filter2d's padding)."""
    x = torch.randn(2, 3, 9, 7)
    out = blur_images(x, sigma)
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out.double(), hand_blur(x, sigma), rtol=0, atol=2e-6)


def test_under_bf16_autocast_the_blur_stays_float32():
    x = torch.randn(2, 1, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = blur_images(x, 1.0)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), hand_blur(x, 1.0), rtol=0, atol=2e-6)


def test_d_blurs_its_input_before_its_first_layer():
    """D with sigma set equals D without, on the blurred images; sigma 0 switches it off again."""
    D = Discriminator(16, 1, lambda r: 8, 4)
    x = torch.randn(4, 1, 16, 16, requires_grad=True)
    plain = D(blur_images(x, 1.5))
    D.set_blur_sigma(1.5)
    blurred = D(x)
    torch.testing.assert_close(blurred, plain, rtol=0, atol=1e-6)
    # the R1 gradient is taken at the images before the blur (the official: real_img_tmp)
    (grad,) = torch.autograd.grad(blurred.sum(), x)
    assert grad.abs().sum() > 0
    D.set_blur_sigma(0.0)
    assert not D.blurs and torch.equal(D(x), Discriminator.forward(D, x))


def official_sigma(cur_nimg: int, init_sigma: float, fade_kimg: float) -> float:
    """The StyleGAN3 repository's training/loss.py: blur_sigma at cur_nimg images shown."""
    return max(1 - cur_nimg / (fade_kimg * 1e3), 0) * init_sigma if fade_kimg > 0 else 0


def sg3_tiny(schedule: str) -> list[str]:
    return ["architecture.latent_dim=8", "architecture.w_dim=8", "architecture.channel_base=64",
            "architecture.channel_max=8", "architecture.num_layers=4", "growth.batch_size=8",
            f"architecture.d_blur_sigma={schedule}", "metric=[]"]


@pytest.mark.parametrize("batch", [32, 64])
def test_the_papers_fade_reaches_d_at_every_images_shown(tmp_path, batch):
    """The paper's StyleGAN3-R setting as the docs write it (sigma 10, linear to 0 over batch *
    200 / 32 kimg) gives D the official blur_sigma at every images-shown count, the fade's end and
    after it included, through the run's schedules."""
    fade = batch * 200 / 32
    sched = f"{{schedule='linear', start=10.0, end=0.0, kimg={fade:g}}}"
    recipe, plugins = load_recipe(RECIPE, [*sg3_tiny(sched), f"run.out_dir='{tmp_path}'", "run.total_kimg=1000"])
    run = build_run(recipe, plugins)
    D = run.D
    for nimg in (0, 32, 1000, 12_345, 99_968, int(fade * 1000) - 32, int(fade * 1000), int(fade * 1000) + 32, 900_000):
        run.cur_nimg = nimg
        run.apply_schedules()
        assert D.blur_sigma == official_sigma(nimg, 10.0, fade), nimg
        assert D.blurs == (math.floor(3 * D.blur_sigma) > 0)


def test_the_recipes_blur_fades_as_the_official_formula_over_its_kimg(tmp_path):
    """recipes/stylegan3.toml: sigma is the official formula for its own start and kimg."""
    recipe, plugins = load_recipe(RECIPE, [*sg3_tiny("0.0")[:-2], f"run.out_dir='{tmp_path}'"])
    spec = next(s for s in recipe.schedules if s.key == "architecture.d_blur_sigma")
    start, fade = spec.options.start, spec.options.kimg
    assert spec.name == "linear" and spec.options.end == 0 and start > 0 and fade > 0
    run = build_run(recipe, plugins)
    for i in range(0, 41):
        nimg = int(fade * 1000 * i / 32)
        run.cur_nimg = nimg
        run.apply_schedules()
        assert run.D.blur_sigma == pytest.approx(official_sigma(nimg, start, fade), rel=1e-12, abs=1e-12), nimg
