"""Who initialises what: an architecture's own initialisation survives the build (whole, or a
marked sub-module), the recipe's initializer and spectral norm leave frozen layers alone, and a
frozen sub-network loaded from a local weights file is never stepped or averaged, stays
bit-identical through training, resume and two processes, is recorded in checkpoints by path and
digest instead of copied, and a changed file stops a resume in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import CheckpointError
from gan_kit.plugin_api.ownership import sha256_of
from gan_kit.recipe import load_recipe

PLUGIN = textwrap.dedent('''
    """Test architectures: "owned" initialises itself; "marked" owns only D's head; "frozen-parts"
    loads a frozen 1x1 conv into G and a frozen feature conv into D from local files."""
    import attrs
    import torch
    from torch import nn

    from gan_kit import Architecture, hookimpl, load_frozen, option, own_init


    class G(nn.Module):
        def __init__(self, z, c, r):
            super().__init__()
            self.c, self.r = c, r
            self.fc = nn.Linear(z, c * r * r)
            self.out = nn.Conv2d(c, c, 1)

        def forward(self, z):
            return torch.tanh(self.out(self.fc(z).view(-1, self.c, self.r, self.r)))


    class D(nn.Module):
        def __init__(self, c, r):
            super().__init__()
            self.features = nn.Conv2d(c, 4, 3, padding=1)
            self.head = nn.Linear(4 * r * r, 1)

        def forward(self, x):
            return self.head(torch.relu(self.features(x)).flatten(1)).squeeze(1)


    class Owned(Architecture):
        """Sets every weight to 0.01 * (layer index + 1) and every bias to 0.5 itself."""
        owns_init = True

        @attrs.frozen
        class Options:
            latent_dim: int = option(8, help="z size.")

        @property
        def latent_dim(self):
            return self.options.latent_dim

        def build(self, resolution, channels):
            g, d = G(8, channels, resolution), D(channels, resolution)
            with torch.no_grad():
                for i, layer in enumerate([g.fc, g.out, d.features, d.head]):
                    layer.weight.fill_(0.01 * (i + 1))
                    layer.bias.fill_(0.5)
            return g, d


    class Marked(Owned):
        """The recipe initialises all but D's head, which the architecture sets (spectral norm too)."""
        owns_init = False

        def build(self, resolution, channels):
            g, d = super().build(resolution, channels)
            own_init(d.head, spectral_norm=False)
            return g, d


    class FrozenParts(Owned):
        """G.out and D.features loaded frozen from files."""
        owns_init = False

        @attrs.frozen
        class Options:
            g_weights: str = option(help="G.out's weights file.", path=True)
            d_weights: str = option(help="D.features' weights file.", path=True)
            latent_dim: int = option(8, help="z size.")

        def build(self, resolution, channels):
            g, d = G(8, channels, resolution), D(channels, resolution)
            load_frozen(g.out, self.options.g_weights)
            load_frozen(d.features, self.options.d_weights)
            return g, d


    @hookimpl
    def register_architectures(register):
        register("owned", Owned)
        register("marked", Marked)
        register("frozen-parts", FrozenParts)
''')


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "arch_plugin.py"
    path.write_text(PLUGIN)
    return path


@pytest.fixture
def weights(tmp_path):
    """Random weights files for G's 1x1 conv (1 -> 1) and D's feature conv (1 -> 4, 3x3)."""
    gen = torch.Generator().manual_seed(7)
    g = {"weight": torch.randn(1, 1, 1, 1, generator=gen), "bias": torch.randn(1, generator=gen)}
    d = {"weight": torch.randn(4, 1, 3, 3, generator=gen), "bias": torch.randn(4, generator=gen)}
    torch.save(g, tmp_path / "g_out.pt")
    torch.save(d, tmp_path / "d_features.pt")
    return g, d


def arch_overrides(plugin, tmp_path, name="frozen-parts"):
    extra = f', g_weights="{tmp_path / "g_out.pt"}", d_weights="{tmp_path / "d_features.pt"}"' \
        if name == "frozen-parts" else ""
    return [f"plugins=['{plugin}']", f'architecture={{name="{name}"{extra}}}', 'growth={name="static", batch_size=8}',
            "penalty=[]"]


def make(tiny_recipe, overrides, out=None, kimg=0.048):
    recipe, plugins = load_recipe(tiny_recipe, [*overrides, f"run.total_kimg={kimg}",
                                                *([f"run.out_dir='{out}'"] if out else [])])
    return build_run(recipe, plugins)


def test_an_architectures_own_init_survives_the_build(tiny_recipe, plugin, tmp_path):
    run = make(tiny_recipe, arch_overrides(plugin, tmp_path, "owned"))  # init "equalized-lr", the default
    for i, layer in enumerate([run.G.fc, run.G.out, run.D.features, run.D.head]):
        assert torch.equal(layer.weight, torch.full_like(layer.weight, 0.01 * (i + 1))), i
        assert torch.equal(layer.bias, torch.full_like(layer.bias, 0.5))
    assert not hasattr(run.G.fc, "parametrizations")  # equalized lr did not wrap it either


def test_the_recipe_initialises_only_what_the_architecture_did_not_mark(tiny_recipe, plugin, tmp_path):
    run = make(tiny_recipe, [*arch_overrides(plugin, tmp_path, "marked"), 'init={name="normal", std=0.02}',
                             'architecture.spectral_norm="D"'])
    assert torch.equal(run.D.head.weight, torch.full_like(run.D.head.weight, 0.04))  # its own, not normalised
    assert not hasattr(run.D.head, "parametrizations")
    assert hasattr(run.D.features, "parametrizations")  # spectral norm where allowed
    w = run.G.fc.weight.detach()
    assert abs(float(w.std()) - 0.02) < 0.005 and float(run.G.fc.bias.detach().abs().max()) == 0.0  # the recipe's normal


def test_frozen_layers_get_no_init_no_spectral_norm_and_no_optimizer(tiny_recipe, plugin, tmp_path, weights):
    g, d = weights
    run = make(tiny_recipe, [*arch_overrides(plugin, tmp_path), 'architecture.spectral_norm="both"',
                             'init={name="normal"}'])
    assert torch.equal(run.D.features.weight, d["weight"]) and torch.equal(run.G.out.bias, g["bias"])
    assert not hasattr(run.D.features, "parametrizations") and hasattr(run.D.head, "parametrizations")
    stepped = {id(p) for opt in (run.opt_G, run.opt_D) for group in opt.param_groups for p in group["params"]}
    assert id(run.D.features.weight) not in stepped and id(run.G.out.weight) not in stepped
    assert id(run.G.fc.bias) in stepped


def frozen_equal(run, g, d):
    for net in (run.G, run.G_ema):
        assert torch.equal(net.out.weight, g["weight"]) and torch.equal(net.out.bias, g["bias"])
    assert torch.equal(run.D.features.weight, d["weight"]) and torch.equal(run.D.features.bias, d["bias"])


def test_a_frozen_subnetwork_stays_bit_identical_and_is_recorded_not_copied(tiny_recipe, plugin, tmp_path, weights):
    from test_checkpoint import assert_same_state

    g, d = weights
    overrides = arch_overrides(plugin, tmp_path)
    straight = make(tiny_recipe, overrides, tmp_path / "straight")
    fc_before = straight.G.fc.weight.clone()
    train(straight)
    frozen_equal(straight, g, d)
    assert not torch.equal(straight.G.fc.weight, fc_before)  # the rest trained
    state = ckpt.load(tmp_path / "straight" / "checkpoints" / "latest.pt")
    assert not [k for k in state["G"] if k.startswith("out.")] and not [k for k in state["G_ema"] if k.startswith("out.")]
    assert not [k for k in state["D"] if k.startswith("features.")] and "head.bias" in state["D"]
    assert state["frozen_files"] == {
        "G.out": {"path": str(tmp_path / "g_out.pt"), "sha256": sha256_of(tmp_path / "g_out.pt")},
        "D.features": {"path": str(tmp_path / "d_features.pt"), "sha256": sha256_of(tmp_path / "d_features.pt")}}

    train(make(tiny_recipe, overrides, tmp_path / "split", kimg=0.024))
    resumed = make(tiny_recipe, overrides, tmp_path / "split")
    train(resumed, resume=True)
    frozen_equal(resumed, g, d)
    assert_same_state(straight, resumed)

    # --init-from starts a new run from the trained weights, the frozen parts from their files
    from gan_kit.runs.resume import init_from

    fresh = make(tiny_recipe, overrides, tmp_path / "fine-tune")
    init_from(fresh, tmp_path / "straight")
    assert torch.equal(fresh.D.head.bias, straight.D.head.bias)
    frozen_equal(fresh, g, d)

    # gankit sample / export rebuild G_ema from the checkpoint's recipe and the file
    G, *_ = ckpt.load_generator(tmp_path / "straight" / "checkpoints" / "latest.pt")
    assert torch.equal(G.out.weight, g["weight"]) and torch.equal(G.fc.weight, straight.G_ema.fc.weight)


def test_a_changed_frozen_weights_file_stops_a_resume_in_one_line(tiny_recipe, plugin, tmp_path, weights):
    g, d = weights
    overrides = arch_overrides(plugin, tmp_path)
    train(make(tiny_recipe, overrides, tmp_path / "run", kimg=0.024))
    torch.save({k: v + 1 for k, v in d.items()}, tmp_path / "d_features.pt")
    with pytest.raises(CheckpointError) as e:
        train(make(tiny_recipe, overrides, tmp_path / "run"), resume=True)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"--resume: {tmp_path / 'run' / 'checkpoints' / 'latest.pt'}: the "
                                              f"frozen weights of D.features changed: {tmp_path / 'd_features.pt'}")
    assert "restore that file, or start a new run with --out" in msg
    # gankit sample / eval / export refuse a G whose frozen part changed just as well
    torch.save({k: v * 2 for k, v in g.items()}, tmp_path / "g_out.pt")
    with pytest.raises(CheckpointError, match=r"latest.pt: the frozen weights of G.out changed: "):
        ckpt.load_generator(tmp_path / "run" / "checkpoints" / "latest.pt")


def test_a_frozen_subnetwork_stays_bit_identical_under_two_processes(tiny_recipe, plugin, tmp_path, weights):
    g, d = weights
    worker = Path(__file__).with_name("ddp_worker.py")
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(worker), str(tiny_recipe), str(tmp_path / "two"),
                          f"frozen={';'.join(arch_overrides(plugin, tmp_path) + ['run.total_kimg=0.048'])}"],
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert not (tmp_path / "two" / "frozen" / "error.txt").exists()
    state = ckpt.load(tmp_path / "two" / "frozen" / "checkpoints" / "latest.pt")
    assert state["step"] == 6 and "features.weight" not in state["D"]
    recipe, plugins = load_recipe(tiny_recipe, arch_overrides(plugin, tmp_path) + ["run.total_kimg=0.048"])
    one = build_run(recipe, plugins, out_dir=tmp_path / "one")
    train(one)
    for k, v in state["D"].items():  # two processes end where one does, around the frozen features
        torch.testing.assert_close(v, one.D.state_dict()[k], rtol=0, atol=1e-5)
    frozen_equal(one, g, d)


def test_a_frozen_network_with_batchnorm_keeps_its_loaded_statistics_in_training(tmp_path):
    """load_frozen puts the module in eval mode and keeps it there when its owner calls
    train(): a training-mode forward of the owner neither normalises with the batch's statistics
    nor overwrites the loaded running statistics."""
    from torch import nn
    from gan_kit import load_frozen

    def features() -> nn.Module:
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Dropout(0.5))

    source = features()
    source[1].running_mean.fill_(0.3)
    source[1].running_var.fill_(2.0)
    torch.save(source.state_dict(), tmp_path / "features.pt")
    owner = nn.Sequential(load_frozen(features(), tmp_path / "features.pt"), nn.Conv2d(4, 1, 1))
    owner.train()
    assert owner.training and owner[1].training
    assert not owner[0].training and not any(m.training for m in owner[0].modules())
    x = torch.randn(8, 1, 5, 5) * 4 + 1
    out = owner[0](x)
    bn = owner[0][1]
    assert torch.equal(bn.running_mean, torch.full((4,), 0.3)) and torch.equal(bn.running_var, torch.full((4,), 2.0))
    with torch.no_grad():
        source.eval()
        assert torch.equal(out, source(x))  # the loaded statistics, no dropout


@pytest.mark.parametrize("content, expected", [
    (None, "frozen weights: a directory, not a file"),
    (b"not a checkpoint", "frozen weights: not a torch state dict nor a safetensors file (UnpicklingError)"),
])
def test_a_frozen_weights_path_that_is_no_weights_file_is_one_line_saying_what_to_give(tmp_path, content, expected):
    from torch import nn
    from gan_kit import GankitError, load_frozen

    path = tmp_path / "w.pt"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(GankitError) as e:
        load_frozen(nn.Linear(2, 2), path)
    assert str(e.value) == (f"{path}: {expected}; give a local file saved with torch.save(module.state_dict(), path) "
                            f"or a .safetensors file")
