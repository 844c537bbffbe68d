"""Every gankit command through click's CliRunner (fast, in-process), plus the error contract:
one line per problem, exit 2, a traceback only with --debug."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from PIL import Image

from gan_kit import __version__
from gan_kit.cli import cli
from gan_kit.base.errors import RecipeError
from gan_kit.recipe import load_recipe, recipe_to_dict


@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_version():
    import torch

    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"gankit {__version__} (torch {torch.__version__}, Python ")


def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "list-plugins", "recipe", "sample"):
        assert f"  {command} " in result.stdout


def test_list_plugins_json_kind():
    result = invoke("list-plugins", "--kind", "loss", "--json")
    assert result.exit_code == 0
    items = json.loads(result.stdout)
    assert {i["kind"] for i in items} == {"loss"}
    hinge = next(i for i in items if i["name"] == "hinge")
    assert hinge["plugin"] == "gan_kit.builtin.objectives.losses" and hinge["broken"] is False
    assert hinge["summary"].startswith("Hinge loss")


def test_list_plugins_verbose_options():
    result = invoke("list-plugins", "--kind", "loss", "--json", "--verbose")
    items = {i["name"]: i for i in json.loads(result.stdout)}
    gp = {o["name"]: o for o in items["wgan-gp"]["options"]}["gp_weight"]
    assert gp == {"name": "gp_weight", "type": "float", "default": 10.0, "required": False,
                  "help": "Weight lambda of the gradient penalty (PGGAN: 10). Allowed: >= 0."}
    table = invoke("list-plugins", "--kind", "growth", "-v")
    assert table.exit_code == 0
    assert "growth progressive" in table.stdout and "start_resolution" in table.stdout
    assert "integer | table integer -> integer" in table.stdout  # batch_size's type
    assert "│ growth " in table.stdout and "│ update " not in table.stdout


def test_list_plugins_rejects_unknown_kind():
    result = invoke("list-plugins", "--kind", "losses")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --kind: 'losses' is not one of ") and result.stderr.count("\n") == 1
    assert "(choose one of " in result.stderr and "Usage:" not in result.stderr


def test_recipe_check_ok(tiny_recipe):
    result = invoke("recipe", "check", tiny_recipe)
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"{tiny_recipe}: ok\n", "")


def test_recipe_show_round_trips(tiny_recipe, tmp_path):
    result = invoke("recipe", "show", tiny_recipe, "--set", "loss.name=bce", "--set", "run.seed=3")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"# {tiny_recipe} resolved by gankit {__version__}\n")
    assert "[ema]\ndecay = 0.9\nhalf_life_kimg = 10.0\nrampup = 0.05\n" in result.stdout
    assert "g_lr" not in result.stdout  # None left out
    assert "compile = false" in result.stdout  # defaults filled in
    shown = tmp_path / "shown.toml"
    shown.write_text(result.stdout, encoding="utf-8")
    original, _ = load_recipe(tiny_recipe, ["loss.name=bce", "run.seed=3"])
    again, _ = load_recipe(shown)
    assert recipe_to_dict(again) == recipe_to_dict(original)
    assert again.loss.name == "bce" and again.run.seed == 3
    # showing the shown recipe gives the same text (apart from the header's path)
    twice = invoke("recipe", "show", shown)
    assert twice.stdout.split("\n", 1)[1] == result.stdout.split("\n", 1)[1]


def test_dry_run_prints_the_plan(tiny_recipe, tmp_path):
    result = invoke("run", tiny_recipe, "--dry-run", "--out", tmp_path / "elsewhere")
    assert result.exit_code == 0, result.output
    assert f"recipe {tiny_recipe}: ok" in result.stdout
    assert "4px" in result.stdout and "8px" in result.stdout
    assert str(tmp_path / "elsewhere") in result.stdout.replace("\n", "")
    assert not (tmp_path / "elsewhere").exists()


def test_errors_are_one_line_without_traceback_and_debug_shows_it(write_recipe):
    bad = write_recipe('[loss]\nname = "hing"\n', "bad.toml")
    result = invoke("recipe", "check", bad)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {bad}: loss.name: unknown loss 'hing' (did you mean 'hinge'?)")
    assert len(result.stderr.splitlines()) == 1
    for args in (["recipe", "check", bad, "--debug"], ["--debug", "recipe", "check", bad]):
        debug = invoke(*args)
        assert isinstance(debug.exception, RecipeError)
        assert debug.exit_code == 1
        assert "did you mean 'hinge'" in str(debug.exception)


def test_sample_missing_checkpoint(tmp_path):
    result = invoke("sample", tmp_path / "nope.pt")
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'nope.pt'}: checkpoint not found (list the run's checkpoints/ folder)\n"


def test_run_resume_and_sample(tiny_recipe, tmp_path, monkeypatch):
    """Train 2 steps into --out, resume to 4 steps, then sample grids from the checkpoint."""
    out = tmp_path / "run-out"
    short = ["--set", "run.total_kimg=0.016", "--set", "run.tick_kimg=0.008"]
    first = invoke("run", tiny_recipe, "--out", out, *short)
    assert first.exit_code == 0, first.output
    saved = (out / "recipe.toml").read_text(encoding="utf-8")
    assert saved.startswith("# resolved by gankit; versions: torch ")
    assert f'out_dir = "{out.as_posix()}"' in saved
    assert (out / "checkpoints" / "latest.pt").is_file()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["Progress/kimg"] == 0.016

    resumed = invoke("run", tiny_recipe, "--out", out, "--resume",
                     "--set", "run.total_kimg=0.032", "--set", "run.tick_kimg=0.008")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["Progress/kimg"] == 0.032

    ckpt = out / "checkpoints" / "latest.pt"
    a, b, c = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    result = invoke("sample", ckpt, "-n", "4", "--seed", "1", "--out", a)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("wrote 4 images at 4px (alpha 1.00) to ")  # still in phase 0 (4px)
    invoke("sample", ckpt, "-n", "4", "--seed", "1", "--out", b)
    invoke("sample", ckpt, "-n", "4", "--seed", "2", "--out", c)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    with Image.open(a) as im:
        assert im.size == (2 * 32 + 3, 2 * 32 + 3)  # a 2x2 grid of 4px images upscaled to 32px, 1px padding
    # `--n` (eval's spelling) is the same option as `-n`
    invoke("sample", ckpt, "--n", "4", "--seed", "1", "--out", b)
    assert a.read_bytes() == b.read_bytes()

    monkeypatch.chdir(tmp_path)
    default = invoke("sample", ckpt, "-n", "1")
    assert default.exit_code == 0 and (tmp_path / "grid.png").is_file()


def test_resume_without_checkpoint_is_a_user_error(tiny_recipe, tmp_path):
    result = invoke("run", tiny_recipe, "--out", tmp_path / "fresh", "--resume")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --resume: no checkpoint at {tmp_path / 'fresh' / 'checkpoints' / 'latest.pt'}")


def test_sample_truncation_and_interpolation(tmp_path):
    """--truncation needs a mapping network (one line otherwise); --interpolate writes a strip
    of STEPS images a row, or an animated GIF."""
    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    sg2 = make_run(tmp_path / "sg2", overrides=[
        "architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8}",
        "growth={name='static', batch_size=8}", "penalty=[]", "run.total_kimg=0.016"])
    train(sg2)
    ckpt = tmp_path / "sg2" / "run" / "checkpoints" / "latest.pt"
    zero = tmp_path / "zero.png"
    result = invoke("sample", ckpt, "-n", "4", "--truncation", "0", "--out", zero)
    assert result.exit_code == 0, result.output
    with Image.open(zero) as im:
        cells = [im.crop((1 + 33 * i, 1, 33 + 33 * i, 33)).tobytes() for i in range(2)]
    assert cells[0] == cells[1]  # psi = 0: the average-W image for every z
    strip = tmp_path / "strip.png"
    result = invoke("sample", ckpt, "-n", "2", "--interpolate", "5", "--out", strip)
    assert result.exit_code == 0 and "wrote 2 interpolations of 5 images" in result.stdout
    with Image.open(strip) as im:
        assert im.size == (5 * 33 + 1, 2 * 33 + 1)
    gif = tmp_path / "walk.gif"
    assert invoke("sample", ckpt, "-n", "2", "--interpolate", "4", "--out", gif).exit_code == 0
    with Image.open(gif) as im:
        assert im.n_frames == 4 + 2  # forth and back
    pg = make_run(tmp_path / "pg", overrides=["run.total_kimg=0.016"])
    train(pg)
    result = invoke("sample", tmp_path / "pg" / "run" / "checkpoints" / "latest.pt", "--truncation", "0.5")
    assert result.exit_code == 2
    assert result.stderr == ("error: --truncation: architecture 'pggan' has no mapping network to truncate "
                             "(use stylegan2, or leave --truncation at 1)\n")


def test_the_progress_bar_runs_with_the_default_recipe_settings(tiny_recipe, tmp_path):
    """Every shipped recipe shows the progress bar (run.progress defaults to true)."""
    out = tmp_path / "bar"
    result = invoke("run", tiny_recipe, "--out", out, "--set", "run.progress=true", "--set", "run.total_kimg=0.016")
    assert result.exit_code == 0, result.output
    assert "done: " in result.stderr
