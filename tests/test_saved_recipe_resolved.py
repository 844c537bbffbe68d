"""The recipe a run saves (``recipe.toml``, the checkpoints) and ``gankit recipe show`` hold what
the components resolved from the recipe: StyleGAN2's ``conv_clamp = "auto"`` as the bound it
built with, image-folder's ``pad_color`` as the colour it padded with, progressive growth's
``base_batch_size`` as the batch lr_rule divides by. Machine choices (``run.device``,
``run.precision = "auto"``) stay "auto" and are named in the header. ``--resume`` with the saved
recipe works, and keeps the network's clamp when ``run.precision`` changes."""

from __future__ import annotations

import tomllib

import pytest
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.recipe import load_recipe
from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.checkpoint import load_generator

SG2 = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8, "
       "modconv='scaled'}", "growth={name='static', batch_size=8}", "penalty=[]", "metric=[]"]


@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def wide_images(folder, n=8):
    """``n`` 16x12 RGB images: fit = "pad" letterboxes them on the padding colour."""
    folder.mkdir()
    for i in range(n):
        Image.new("RGB", (16, 12), (30 * i, 255 - 30 * i, 90)).save(folder / f"{i}.png")
    return folder


def clamps(G):
    from gan_kit.builtin.architectures.stylegan2 import ModulatedConv

    return {m.clamp for m in G.modules() if isinstance(m, ModulatedConv)}


def test_a_tiny_stylegan2_fp16_run_saves_the_clamp_and_padding_it_resolved(tiny_recipe, tmp_path):
    data = wide_images(tmp_path / "imgs")
    out = tmp_path / "run"
    sets = [*SG2, f"data={{name='image-folder', path='{data.as_posix()}', resolution=16, fit='pad', "
                  f"background=[10, 20, 30]}}", "run.precision='fp16'", "run.total_kimg=0.016", "run.tick_kimg=0.008"]
    args = [a for s in sets for a in ("--set", s)]
    first = invoke("run", tiny_recipe, "--out", out, *args)
    assert first.exit_code == 0, first.output
    saved = tomllib.loads((out / "recipe.toml").read_text(encoding="utf-8"))
    assert saved["architecture"]["conv_clamp"] == 256
    assert saved["data"]["pad_color"] == [10, 20, 30]  # data.background, the colour the images were padded with
    in_checkpoint = tomllib.loads(ckpt.load(out / "checkpoints" / "latest.pt")["recipe"])
    assert in_checkpoint["architecture"]["conv_clamp"] == 256 and in_checkpoint["data"]["pad_color"] == [10, 20, 30]

    shown = invoke("recipe", "show", out / "recipe.toml")
    assert shown.exit_code == 0, shown.output
    assert "conv_clamp = 256.0\n" in shown.stdout and "pad_color = [10, 20, 30]\n" in shown.stdout

    # A [run] key may change on resume: the networks keep the clamp they were trained with.
    resumed = invoke("run", "--resume", out, "--set", "run.total_kimg=0.024", "--set", "run.precision=fp32")
    assert resumed.exit_code == 0, resumed.output
    assert "run.precision" in resumed.stderr and "conv_clamp" not in resumed.stderr  # only the precision changed
    again = tomllib.loads((out / "recipe.toml").read_text(encoding="utf-8"))
    assert again["run"]["precision"] == "fp32" and again["architecture"]["conv_clamp"] == 256
    G, *_ = load_generator(out / "checkpoints" / "latest.pt")
    assert clamps(G) == {256.0}


def test_recipe_show_writes_the_resolved_values_and_they_load_back(tiny_recipe, tmp_path):
    shown = invoke("recipe", "show", tiny_recipe, "--set", "growth.lr_rule=linear", "--set", "run.precision=fp16",
                   *[a for s in SG2[:1] for a in ("--set", s)], "--set", "growth={name='static', batch_size=8}",
                   "--set", "data.resolution=16")
    assert shown.exit_code == 0, shown.output
    assert "conv_clamp = 256.0\n" in shown.stdout
    path = tmp_path / "shown.toml"
    path.write_text(shown.stdout, encoding="utf-8")
    recipe, _ = load_recipe(path)
    assert recipe.architecture.options.conv_clamp == 256.0
    fp32 = invoke("recipe", "show", tiny_recipe, *[a for s in SG2[:1] for a in ("--set", s)],
                  "--set", "growth={name='static', batch_size=8}", "--set", "data.resolution=16")
    assert 'conv_clamp = "none"\n' in fp32.stdout  # "auto" without fp16: no clamp, written as TOML spells None

    grows = invoke("recipe", "show", tiny_recipe, "--set", "growth.lr_rule=linear",
                   "--set", "growth.batch_size={4 = 16, 8 = 8}")
    assert grows.exit_code == 0, grows.output
    assert tomllib.loads(grows.stdout)["growth"]["base_batch_size"] == 16  # the batch at start_resolution


def test_the_header_names_what_this_machine_chose_for_auto_keys(tiny_recipe, tmp_path):
    out = tmp_path / "auto"
    result = invoke("run", tiny_recipe, "--out", out, "--set", "run.device=auto", "--set", "run.precision=auto",
                    "--set", "run.total_kimg=0.008", "--set", "run.tick_kimg=0.008")
    assert result.exit_code == 0, result.output
    import torch

    from gan_kit.base.cpufeatures import auto_precision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    text = (out / "recipe.toml").read_text(encoding="utf-8")
    assert text.splitlines()[1] == (f'# chosen on this machine: run.device = "auto" -> {device}, '
                                    f'run.precision = "auto" -> {auto_precision(device)}')
    saved = tomllib.loads(text)
    assert saved["run"]["device"] == "auto" and saved["run"]["precision"] == "auto"  # chosen again on resume
