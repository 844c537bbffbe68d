"""The ``sngan-resnet``, ``sagan`` and ``biggan`` architectures inside gankit: recipes build and
train them, their options are checked at load, and they are listed (the numbers against
StudioGAN's code: tests/test_studiogan_parity.py)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from gan_kit.base.errors import RecipeError
from gan_kit.builtin.architectures.studiogan import SelfAttention
from gan_kit.cli.group import cli
from gan_kit.runs.checkpoint import load_generator
from gan_kit.testing import make_run, train_steps

RECIPE = """\
[run]
seed = 0
device = "cpu"
precision = "fp32"
out_dir = "{out_dir}"
total_kimg = 0.008
tick_kimg = 0.004
snapshot_ticks = 0
sample_grid = 4
progress = false

[data]
name = "digits"
resolution = 32

[architecture]
name = "{name}"
conditional = true
latent_dim = 20
g_conv_dim = 4
d_conv_dim = 8

[init]
name = "orthogonal"

[loss]
name = "hinge"

[update]
name = "d-then-g"

[growth]
name = "static"
batch_size = 4

[optim]
lr = 0.0002
betas = [0.5, 0.999]
"""


def _run(tmp_path, name: str, extra=()):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(out_dir=(tmp_path / "run").as_posix(), name=name))
    return make_run(tmp_path, recipe=recipe, overrides=list(extra))


@pytest.mark.parametrize("name", ["biggan", "sagan"])
def test_a_recipe_builds_and_trains_the_studiogan_networks(tmp_path, name):
    run = _run(tmp_path, name, ["architecture.g_attention=[2]"] if name == "biggan" else [])
    before = {k: v.clone() for k, v in run.G.state_dict().items()}
    stats = train_steps(run, 2)
    assert all(torch.isfinite(torch.tensor(v)) for k, v in stats.items() if k.startswith("Loss/"))
    assert any(not torch.equal(before[k], v) for k, v in run.G.state_dict().items())
    assert sum(isinstance(m, SelfAttention) for m in run.G.modules()) == 1
    assert not run.arch.joint_d_forward  # one power iteration per D forward, as StudioGAN's loop
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    G, _, _, _ = load_generator(latest)  # the checkpoint rebuilds G_ema (spectral norm's u, v included)
    with torch.no_grad():
        images = G(torch.randn(3, 20), torch.tensor([0, 1, 2]))
    assert images.shape == (3, 1, 32, 32) and torch.isfinite(images).all()


def test_recipe_spectral_norm_and_a_latent_that_does_not_split_are_refused(tmp_path):
    with pytest.raises(RecipeError) as e:
        _run(tmp_path, "biggan", ["architecture.spectral_norm='D'", "architecture.latent_dim=30"])
    text = "\n".join(e.value.problems)
    assert "normalises its own layers as StudioGAN does" in text
    assert "architecture.latent_dim: 30 does not split into 4 equal chunks" in text


def test_attention_after_a_block_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(RecipeError) as e:
        _run(tmp_path, "sngan-resnet", ["architecture.d_attention=[5]"])
    assert any("architecture.d_attention: block 5 does not exist: 32 px has blocks 1 to 4" in p
               for p in e.value.problems), e.value.problems


def test_list_plugins_shows_the_architectures_and_the_importer():
    runner = CliRunner()
    arch = runner.invoke(cli, ["list-plugins", "--kind", "architecture"])
    assert arch.exit_code == 0, arch.output
    for name in ("sngan-resnet", "sagan", "biggan"):
        assert name in arch.output
    imp = runner.invoke(cli, ["list-plugins", "--kind", "importer"])
    assert "studiogan" in imp.output
