"""Images as users bring them (emoji-like sets: non-square, transparent): image-folder's fit =
"crop" | "pad" (letterbox in a chosen colour), alpha composited on a chosen background or kept as a
4th channel, and the one line that says how many images were cropped, padded or flattened."""

from __future__ import annotations

import logging
import zipfile

import pytest
import torch
from PIL import Image

from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import RecipeError
from gan_kit.recipe import load_recipe


@pytest.fixture(autouse=True)
def _data_logger_enabled(monkeypatch):
    # An Optuna SQLite storage opened earlier in the process runs alembic, whose logging.config
    # call disables the loggers that existed then (test_new_user_fixes.py says the same).
    monkeypatch.setattr(logging.getLogger("gankit.data"), "disabled", False)


def _recipe(tiny_recipe_text: str, path, extra: str = "") -> str:
    return tiny_recipe_text.replace('[data]\nname = "digits"\nresolution = 8',
                                    f'[data]\nname = "image-folder"\nresolution = 8\npath = "{path.as_posix()}"\n'
                                    f"{extra}")


def _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, extra: str = ""):
    recipe, plugins = load_recipe(write_recipe(_recipe(tiny_recipe_text, folder, extra)))
    return build_run(recipe, plugins).dataset


def _pixels(ds) -> torch.Tensor:
    return ds.uint8_items(list(range(len(ds)))).to(torch.int32)


def test_pad_letterboxes_a_wide_image_in_the_pad_colour(tmp_path, tiny_recipe_text, write_recipe):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (16, 8), (200, 0, 0)).save(folder / "wide.png")  # 16x8 -> 8x4, 2 rows of padding above and below
    Image.new("RGB", (4, 8), (0, 0, 200)).save(folder / "tall.png")  # 4x8 -> 4x8 as it is, 2 columns each side
    ds = _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, 'fit = "pad"\npad_color = [0, 255, 0]')
    tall, wide = _pixels(ds)  # in sorted name order
    green, red, blue = torch.tensor([0, 255, 0]), torch.tensor([200, 0, 0]), torch.tensor([0, 0, 200])
    for rows in (slice(0, 2), slice(6, 8)):
        assert (wide[:, rows, :] == green.view(3, 1, 1)).all()
    assert (wide[:, 2:6, :] == red.view(3, 1, 1)).all()
    for cols in (slice(0, 2), slice(6, 8)):
        assert (tall[:, :, cols] == green.view(3, 1, 1)).all()
    assert (tall[:, :, 2:6] == blue.view(3, 1, 1)).all()


def test_crop_keeps_the_centre_square_of_a_non_square_image(tmp_path, tiny_recipe_text, write_recipe):
    folder = tmp_path / "imgs"
    folder.mkdir()
    im = Image.new("RGB", (24, 8), (0, 0, 0))
    im.paste((255, 255, 255), (8, 0, 16, 8))  # the white centre third
    im.save(folder / "strip.png")
    (pixels,) = _pixels(_dataset(tmp_path, tiny_recipe_text, write_recipe, folder))
    assert (pixels == 255).all()  # only the centre square is left, no padding


def test_grey_padding_is_the_luma_of_the_pad_colour(tmp_path, tiny_recipe_text, write_recipe):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("L", (8, 4), 0).save(folder / "wide.png")
    ds = _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, 'channels = 1\nfit = "pad"\npad_color = [255, 0, 0]')
    (pixels,) = _pixels(ds)
    assert pixels.shape == (1, 8, 8)
    assert (pixels[0, :2] == 76).all() and (pixels[0, 2:6] == 0).all()  # ITU-R 601: 0.299 * 255 = 76.2


@pytest.mark.parametrize("alpha", [0, 77, 128, 255])
def test_composite_is_the_alpha_blend_over_the_background(tmp_path, tiny_recipe_text, write_recipe, alpha):
    folder = tmp_path / "imgs"
    folder.mkdir()
    colour, background = (200, 40, 120), (10, 90, 250)
    Image.new("RGBA", (8, 8), (*colour, alpha)).save(folder / "a.png")
    ds = _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, f"background = {list(background)}")
    (pixels,) = _pixels(ds)
    a = alpha / 255
    expected = torch.tensor([a * c + (1 - a) * b for c, b in zip(colour, background)]).view(3, 1, 1)
    assert pixels.shape == (3, 8, 8)
    assert (pixels - expected).abs().max() <= 1  # 8-bit rounding


def test_alpha_keep_gives_four_channels_with_the_image_alpha(tmp_path, tiny_recipe_text, write_recipe):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGBA", (8, 8), (200, 40, 120, 77)).save(folder / "a.png")
    Image.new("RGB", (8, 8), (1, 2, 3)).save(folder / "b.png")
    Image.new("RGBA", (16, 8), (9, 9, 9, 255)).save(folder / "c.png")
    ds = _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, 'alpha = "keep"\nfit = "pad"\npad_color = [5, 6, 7]')
    a, b, c = _pixels(ds)
    assert a.shape == (4, 8, 8)
    assert (a == torch.tensor([200, 40, 120, 77]).view(4, 1, 1)).all()  # not composited
    assert (b == torch.tensor([1, 2, 3, 255]).view(4, 1, 1)).all()  # opaque: alpha 255
    assert (c[:, :2] == torch.tensor([5, 6, 7, 0]).view(4, 1, 1)).all()  # padding: transparent pad colour
    assert (c[:, 2:6] == torch.tensor([9, 9, 9, 255]).view(4, 1, 1)).all()


def _emoji_like(folder):
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGBA", (16, 8), (255, 0, 0, 100)).save(folder / "a.png")  # non-square, transparent
    Image.new("RGBA", (8, 12), (0, 255, 0, 255)).save(folder / "b.png")  # non-square, alpha channel
    Image.new("RGB", (10, 5), (0, 0, 255)).save(folder / "c.png")  # non-square, opaque
    Image.new("LA", (8, 8), (100, 50)).save(folder / "d.png")  # square, transparent grey
    Image.new("RGB", (8, 8), (1, 2, 3)).save(folder / "e.png")  # square, opaque: nothing to say
    return folder


def _fit_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gankit.data" and "non-square" in r.getMessage()]


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_one_line_counts_cropped_and_flattened_images(tmp_path, tiny_recipe_text, write_recipe, caplog, cache):
    folder = _emoji_like(tmp_path / "imgs")
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, f'cache = "{cache}"')
    (line,) = _fit_lines(caplog)
    assert line.startswith(f"note: data.path: of the 5 images under {folder}, 3 non-square center-cropped")
    assert "3 with an alpha channel flattened onto (255, 255, 255)" in line and 'data.alpha = "keep"' in line


def test_one_line_counts_padded_and_kept_alpha_images_of_a_zip(tmp_path, tiny_recipe_text, write_recipe, caplog):
    folder = _emoji_like(tmp_path / "imgs")
    with zipfile.ZipFile(tmp_path / "set.zip", "w") as zf:
        for p in sorted(folder.iterdir()):
            zf.write(p, f"00000/{p.name}")
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        ds = _dataset(tmp_path, tiny_recipe_text, write_recipe, tmp_path / "set.zip",
                      'alpha = "keep"\nfit = "pad"\npad_color = [0, 0, 0]')
    (line,) = _fit_lines(caplog)
    assert "3 non-square padded (letterboxed) with transparent pixels (colour (0, 0, 0))" in line
    assert "3 with an alpha channel, kept as a 4th channel" in line
    assert ds.uint8_items([0]).shape == (1, 4, 8, 8)


def test_a_square_opaque_set_says_nothing(tmp_path, tiny_recipe_text, write_recipe, caplog):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(folder / "e.png")
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        _dataset(tmp_path, tiny_recipe_text, write_recipe, folder)
    assert not [r for r in caplog.records if r.getMessage().startswith("note: data.path: of the")]


def test_alpha_keep_with_grey_channels_is_one_line(tmp_path, tiny_recipe_text, write_recipe):
    folder = _emoji_like(tmp_path / "imgs")
    path = write_recipe(_recipe(tiny_recipe_text, folder, 'alpha = "keep"\nchannels = 1'))
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    (line,) = e.value.problems
    assert line.startswith(f"{path}: data.alpha: ") and "channels = 3" in line


def test_an_rgba_set_trains_with_four_channels(tmp_path, tiny_recipe_text, write_recipe):
    folder = _emoji_like(tmp_path / "imgs")
    text = _recipe(tiny_recipe_text, folder, 'alpha = "keep"\nfit = "pad"').replace("total_kimg = 0.2",
                                                                                    "total_kimg = 0.016")
    recipe, plugins = load_recipe(write_recipe(text))
    run = build_run(recipe, plugins)
    assert run.channels == 4
    train(run)
    assert run.cur_nimg >= 16
    with torch.no_grad():
        assert run.generate(torch.randn(2, recipe.architecture.options.latent_dim)).shape[1] == 4


def test_an_inception_metric_on_an_rgba_set_is_one_line(tmp_path, tiny_recipe_text, write_recipe):
    from gan_kit.base.errors import GankitError

    folder = _emoji_like(tmp_path / "imgs")
    text = _recipe(tiny_recipe_text, folder, 'alpha = "keep"') + '\n[[metric]]\nname = "fid"\nfeature_extractor = "stub"\n'
    recipe, plugins = load_recipe(write_recipe(text))
    with pytest.raises(GankitError) as e:
        build_run(recipe, plugins)
    assert "\n" not in str(e.value) and "4 channels" in str(e.value) and 'data.alpha = "composite"' in str(e.value)


def test_pad_warns_of_upscaling_by_the_longer_side(tmp_path, tiny_recipe_text, write_recipe, caplog):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (8, 4), (1, 2, 3)).save(folder / "wide.png")  # crop upscales it 2x, pad does not
    for fit, warned in (("crop", True), ("pad", False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gankit.data"):
            _dataset(tmp_path, tiny_recipe_text, write_recipe, folder, f'fit = "{fit}"')
        assert ("upscaled" in caplog.text) is warned, fit
