"""The main recipe's plan, checked by a dry run (training it is measured, not tested: docs/main-recipe.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.base.cpufeatures import auto_precision

ROOT = Path(__file__).resolve().parent.parent


def test_the_main_recipe_plans_what_docs_main_recipe_measured(tmp_path):
    result = CliRunner().invoke(cli, ["run", str(ROOT / "recipes" / "pggan.toml"), "--dry-run",
                                      "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"device cpu ({auto_precision('cpu', cpu_bf16=True)}); data digits: 1797 images 1x16x16" in out
    assert "loss wgan-gp; penalties gradient-penalty x10, drift x0.001; update d-then-g; init equalized-lr" in out
    # phase, resolution, start kimg, fade kimg, batch, batch_gpu, rounds per step, lr scale
    rows = re.findall(r"│ (\d) +│ (\d+)px +│ ([\d.]+) +│ ([\d.]+) +│ (\d+) +│ (\w+) +│ (\d+) +│ ([\d.]+) +│", out)
    assert rows == [("0", "4", "0", "0", "32", "none", "1", "1"), ("1", "8", "15", "15", "32", "none", "1", "1"),
                    ("2", "16", "45", "15", "32", "none", "1", "1")]
    assert re.search(r"total 250 kimg or 9 minutes of training, whichever comes first -> .*r\b", out)


def test_the_main_recipe_measures_a_curve_and_one_critic_step():
    from gan_kit.recipe import load_recipe

    r, _ = load_recipe(ROOT / "recipes" / "pggan.toml")
    assert r.update.options.d_steps == 1 and r.update.name == "d-then-g"
    assert r.run.precision == "auto" and r.run.cpu_bf16  # bf16 on a CPU with native bf16: measured to hold
    (swd,) = r.metrics
    assert swd.name == "swd" and swd.options.num_images == 1024
    assert r.run.total_kimg / swd.slot.every_kimg == 10  # ten points on the curve, the last at the end


def test_the_main_recipe_trains_any_other_data_set_with_one_set(tmp_path):
    # Everything in the main recipe's [data] table is common to every data set, so switching the
    # data set is one --set, as README and the docs show (a digits-only option there would break it).
    from PIL import Image

    from gan_kit.recipe import load_recipe

    Image.new("L", (16, 16), color=128).save(tmp_path / "a.png")
    r, _ = load_recipe(ROOT / "recipes" / "pggan.toml", ["data.name=image-folder", f"data.path={tmp_path}"])
    assert r.data.name == "image-folder" and r.resolution == 16


def test_the_main_recipe_warns_once_naming_its_interpolation_and_the_key_that_silences_it(tmp_path):
    # The first line is about the recipe itself: the 8x8 digits upscaled to 16x16. It names how
    # (bicubic, data.interpolation) and data.upscale, which every data set takes, so that silencing
    # it keeps --set data.name=... working.
    import subprocess
    import sys

    def first_line(*sets: str) -> str:
        cmd = [sys.executable, "-m", "gan_kit", "run", str(ROOT / "recipes" / "pggan.toml"), "--dry-run",
               "--out", str(tmp_path / "r"), *[a for s in sets for a in ("--set", s)]]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return (done.stderr + done.stdout).splitlines()[0]

    first = first_line()
    assert first.startswith("warning: data.resolution: 16 is above the 8px of the digits' 8x8 images")
    assert "upscaled 2x by bicubic interpolation (data.interpolation)" in first
    assert 'data.upscale = "allow"' in first
    assert "upscaled" not in first_line("data.upscale=allow")
    from PIL import Image

    from gan_kit.recipe import load_recipe

    Image.new("L", (8, 8), color=128).save(tmp_path / "a.png")
    r, _ = load_recipe(ROOT / "recipes" / "pggan.toml", ["data.name=image-folder", f"data.path={tmp_path}",
                                                         "data.upscale=allow"])
    assert r.data.name == "image-folder" and r.data.slot.upscale == "allow"


def _digits_recipes() -> list[str]:
    import tomllib

    return sorted(p.name for p in (ROOT / "recipes").glob("*.toml")
                  if tomllib.loads(p.read_text()).get("data", {}).get("name") == "digits")


@pytest.mark.parametrize("name", _digits_recipes())
def test_every_digits_recipe_switches_data_set_with_one_set(tmp_path, name):
    # The docs switch a recipe to your own images with --set data.name=image-folder; a
    # digits-only key in the recipe's [data] table (data.interpolation) made that an 'unknown
    # option' error, so the recipes say their upscaling is meant with data.upscale instead.
    from PIL import Image

    from gan_kit.recipe import load_recipe

    (tmp_path / "c0").mkdir()
    Image.new("L", (16, 16), color=128).save(tmp_path / "c0" / "a.png")
    r, _ = load_recipe(ROOT / "recipes" / name,
                       ["data.name=image-folder", f"data.path={tmp_path}", "data.labels=folders"])
    assert r.data.name == "image-folder"
