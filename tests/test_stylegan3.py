"""The ``stylegan3`` architecture in gankit's engine: a recipe trains it (G's weights, ``w_avg``
and magnitude EMAs move; G_ema takes G's buffers), and its recipe problems are named."""

from __future__ import annotations

import math

import pytest
import torch

from gan_kit import RecipeError
from gan_kit.recipe import load_recipe
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train


def sg3_recipe(tmp_path, text, config="t"):
    """conftest's tiny recipe as 16x16 stylegan3 (4 layers, 8 maps), static growth, R1."""
    arch = text[text.index("[architecture]"):text.index("[init]")]
    text = text.replace(arch, f"[architecture]\nname = \"stylegan3\"\nconfig = \"{config}\"\nlatent_dim = 8\n"
                              "w_dim = 8\nchannel_base = 128\nchannel_max = 8\nnum_layers = 4\n\n")
    growth = text[text.index("[growth]"):text.index("[optim]")]
    text = text.replace(growth, "[growth]\nname = \"static\"\nbatch_size = 8\n\n")
    text = text.replace("resolution = 8", "resolution = 16")
    text = text.replace('name = "gradient-penalty"\nweight = 10.0', 'name = "r1"\nweight = 1.0')
    path = tmp_path / "sg3.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("config", ["t", "r"])
def test_trains_through_the_engine_with_r1(tmp_path, tiny_recipe_text, config):
    """Two iterations: finite losses, the synthesis and mapping weights move, ``w_avg`` and every
    layer's ``magnitude_ema`` move from their start, and G_ema holds G's buffers."""
    recipe, plugins = load_recipe(sg3_recipe(tmp_path, tiny_recipe_text, config))
    run = build_run(recipe, plugins)
    before = {n: p.detach().clone() for n, p in run.G.named_parameters()}
    stats = train(run, max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    changed = {n for n, p in run.G.named_parameters() if not torch.equal(p, before[n])}
    assert "synthesis_network.layers.0.weight" in changed and "mapping_network.layers.0.weight" in changed
    assert run.G.w_avg.abs().sum() > 0
    emas = torch.stack([layer.magnitude_ema for layer in run.G.synthesis_network.layers])
    assert (emas != 1).all()
    assert torch.equal(run.G_ema.w_avg, run.G.w_avg)
    assert torch.equal(torch.stack([layer.magnitude_ema for layer in run.G_ema.synthesis_network.layers]), emas)


def test_recipe_problems_name_growth_and_init(tmp_path, tiny_recipe_text):
    """A growing schedule and an initializer the layers would ignore are refused, each named."""
    path = sg3_recipe(tmp_path, tiny_recipe_text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path, ["growth.name=progressive", "init.name=normal"])
    msg = str(e.value)
    assert "growth.name" in msg and "static" in msg
    assert "init.name" in msg and "'normal'" in msg


def test_style_mixing_replaces_the_ws_from_one_layer_on(tmp_path):
    """With style_mixing_prob 1 a training forward's ws are the first z's up to a cut-off layer in
    [1, num_ws) and a second z's from there on (StyleGAN sec. 3.1), as stylegan2's G."""
    from gan_kit.builtin.architectures.stylegan3 import Generator

    torch.manual_seed(0)
    G = Generator(16, 1, 8, 8, channel_base=64, channel_max=4, num_layers=3, style_mixing_prob=1.0)
    ws = G.mapping(torch.randn(4, 8))
    mixed = G.mix_styles(ws)
    same = (mixed == ws).all(dim=2).all(dim=0)
    cut = int((~same).nonzero()[0])
    assert 1 <= cut < G.num_ws and same[:cut].all() and not same[cut:].any()


@pytest.mark.parametrize("config", ["t", "r"])
def test_resume_is_bit_identical_with_the_fading_d_blur_and_magnitude_emas(tmp_path, tiny_recipe_text, config):
    """A run stopped after 3 of 6 iterations and resumed ends where the uninterrupted run ends:
    G, D, G_ema (w_avg, every layer's magnitude EMA), both optimizers, and D's blur, whose sigma
    fades over the split (lazy R1 every 2nd iteration, on its own step)."""
    from test_checkpoint import assert_same_state

    path = sg3_recipe(tmp_path, tiny_recipe_text, config)
    blur = "architecture.d_blur_sigma={schedule='linear', start=2.0, end=0.0, kimg=0.04}"

    def run_for(out, kimg, resume=False, steps=None):
        recipe, plugins = load_recipe(path, [f"run.out_dir='{out}'", f"run.total_kimg={kimg}", blur,
                                             "penalty.0.interval=2"])
        run = build_run(recipe, plugins)
        train(run, resume=resume, max_steps=steps)
        return run

    straight = run_for(tmp_path / "straight", 0.048)
    first = run_for(tmp_path / "split", 0.048, steps=3)
    first.save_checkpoint()
    assert first.D.blurs and 0 < first.D.blur_sigma < 2
    resumed = run_for(tmp_path / "split", 0.048, resume=True)
    assert first.step == 3 and resumed.step == straight.step == 6
    assert_same_state(straight, resumed)
    assert resumed.D.blur_sigma == straight.D.blur_sigma
    assert resumed.schedule_values == straight.schedule_values
