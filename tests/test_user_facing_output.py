"""What a user reads and sees is right: no circle between two
recipe errors, a warning for upscaled images, ADA's p and every penalty in the tick line and the
report, the resumed run's "done" line, a whole table re-typed on resume, GIF frames as grids,
`gankit bench -h`, help never cut mid-sentence."""

from __future__ import annotations

import json
import logging
import re
import textwrap

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.base.errors import RecipeError
from gan_kit.recipe import load_recipe
from gan_kit.testing import make_run, train_steps, write_tiny_recipe


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


SG2 = textwrap.dedent("""
    [data]
    name = "digits"
    resolution = 8
    [architecture]
    name = "stylegan2"
    latent_dim = 16
    w_dim = 16
    channel_base = 64
    channel_max = 8
    [growth]
    name = "static"
    batch_size = 8
""")


def test_spectral_norm_errors_do_not_send_the_user_in_a_circle(tmp_path):
    """Each refusal's fix, applied, is accepted: stylegan2 has no spectral-norm form (one line,
    'none'); a pggan with equalized lr takes the suggested initializer."""
    path = tmp_path / "sg2.toml"
    path.write_text(SG2, encoding="utf-8")
    with pytest.raises(RecipeError) as e:
        load_recipe(path, ["architecture.spectral_norm=D"])
    assert len(e.value.problems) == 1 and "architecture.spectral_norm" in e.value.problems[0]
    assert 'spectral_norm = "none"' in e.value.problems[0] and "init" not in e.value.problems[0].split(":")[2]
    load_recipe(path, ["architecture.spectral_norm=none"])
    tiny = write_tiny_recipe(tmp_path)
    with pytest.raises(RecipeError) as e:
        load_recipe(tiny, ["architecture.spectral_norm=D"])
    assert 'init.name = "normal"' in e.value.problems[0]
    load_recipe(tiny, ["architecture.spectral_norm=D", "init.name=normal"])


def test_a_resolution_above_the_images_own_size_warns_that_they_are_upscaled(tmp_path, caplog, monkeypatch):
    from gan_kit.builtin.data.datasets import Digits, ImageFolder

    # An Optuna SQLite storage opened earlier in this process runs alembic, whose logging.config
    # call disables every logger that existed then (disable_existing_loggers): enable ours again.
    monkeypatch.setattr(logging.getLogger("gankit.data"), "disabled", False)

    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        Digits().build(8)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        Digits().build(32)
    assert len(caplog.records) == 1
    assert "data.resolution: 32 is above the 8px of the digits' 8x8 images: the images are upscaled 4x" in caplog.text
    caplog.clear()
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i, side in enumerate((40, 12, 64)):
        Image.fromarray(np.full((side, side), 100, np.uint8)).save(folder / f"{i}.png")
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        ImageFolder(ImageFolder.Options(path=str(folder))).build(32)
    assert "32 is above the 12px" in caplog.text  # the smallest image names the upscaling


def test_a_recipe_that_names_the_interpolation_upscales_the_digits_on_purpose(tmp_path, caplog, monkeypatch):
    from gan_kit.builtin.data.datasets import Digits

    monkeypatch.setattr(logging.getLogger("gankit.data"), "disabled", False)  # see the test above
    from gan_kit.plugin_api.components import BuildContext

    tiny = write_tiny_recipe(tmp_path)
    for sets, warned in (([], True), (["data.interpolation=bicubic"], False)):
        recipe, _ = load_recipe(tiny, ["data.resolution=16", *sets])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gankit.data"):
            Digits(recipe.data.options, BuildContext(16, 1, recipe)).build(16)
        assert ("upscaled 2x" in caplog.text) is warned, sets
        if warned:
            assert 'set data.resolution = 8, or set data.upscale = "allow" to upscale on purpose' in caplog.text
            assert "write data.interpolation" not in caplog.text  # a digits-only key: --set data.name would break


def test_ada_p_and_every_penalty_are_in_the_tick_line_and_the_report(tmp_path, capsys):
    from gan_kit.builtin.reporting import tick_keys

    shown = dict(tick_keys({"Loss/D": 1.0, "Loss/G": 2.0, "Loss/D/r1": 0.1, "Loss/G/path-length": 0.3,
                            "Augment/p": 0.05, "Metrics/swd": 9.0, "Metrics/swd/8": 8.0, "Progress/kimg": 1.0}))
    assert list(shown) == ["D", "G", "D/r1", "G/path-length", "aug/p", "swd"]
    run = make_run(tmp_path, overrides=['augment={name="ada"}'])
    train_steps(run, 2)
    tick = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tick 0")]
    assert len(tick) == 1 and " aug/p=" in tick[0] and "D/gradient-penalty=" in tick[0]
    rows = [json.loads(x) for x in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    rows[-1]["Loss/G/path-length"] = 0.25  # a G penalty's column, as stylegan2 writes it
    (run.out_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert invoke("report", run.out_dir).exit_code == 0
    html = (run.out_dir / "report.html").read_text()
    for key in ("Augment/p (last tick)", "Loss/G/path-length (last tick)", "Loss/D/gradient-penalty (last tick)"):
        assert f"<th>{key}</th>" in html, key


def test_a_resumed_run_counts_this_sessions_kimg_and_takes_a_whole_unchanged_table(tmp_path):
    recipe = write_tiny_recipe(tmp_path)
    ada = ["--set", 'augment={name="ada"}']
    assert invoke("run", recipe, *ada, "--set", "run.total_kimg=0.016").exit_code == 0
    r = invoke("run", "--resume", tmp_path / "run", *ada, "--set", "run.total_kimg=0.04")
    assert r.exit_code == 0, r.output
    assert re.search(r"done: 0\.024 kimg in \d+ s \(the run is at 0\.040 kimg\)", r.output), r.output
    r = invoke("run", "--resume", tmp_path / "run", "--set", 'augment={name="ada", target=0.7}',
               "--set", "run.total_kimg=0.05")
    assert r.exit_code == 2 and "augment.target = 0.6, the recipe now says 0.7" in r.output  # a real change


def test_an_interpolation_gif_lays_each_frame_out_as_a_grid(tmp_path):
    from gan_kit.tools.sampling import save_gif

    save_gif(torch.rand(6, 3, 1, 8, 8) * 2 - 1, tmp_path / "walk.gif")
    with Image.open(tmp_path / "walk.gif") as im:
        assert im.size == (3 * 33 + 1, 2 * 33 + 1) and im.n_frames == 3 + 1  # 6 walks: 3 a row, 2 rows


def test_help_is_never_cut_mid_sentence():
    r = invoke("bench", "-h")
    assert r.exit_code == 0 and r.output.startswith("Usage: gankit bench")
    r = invoke("-h")
    commands = r.output.split("Commands:")[1]
    assert r.exit_code == 0 and not re.search(r"\w\.\.\.$", commands, re.M)  # click's cut: "word..."
    assert "or continue the run in RUN_DIR with --resume)." in " ".join(r.output.split())
    r = invoke("list-plugins", "-v")
    assert r.exit_code == 0 and "…" not in r.output
    from gan_kit.plugin_api.manager import build_plugins

    ada = next(c for c in build_plugins().registry if c.kind == "augment" and c.name == "ada")
    assert ada.summary.endswith(".") and "\n" not in ada.summary
