"""Tests of the gankit-lsgan plugin, using gankit only through its public API (``gan_kit`` and
``gan_kit.testing``), as any third-party plugin would."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import gankit_lsgan
from gan_kit import RecipeError
from gan_kit.testing import make_run, train_steps, write_tiny_recipe
from gankit_lsgan import LSGAN, TruncatedNormal


def test_loss_matches_the_paper_formula_in_the_0_1_coding():
    loss = LSGAN()
    real, fake = torch.tensor([0.5, 1.5]), torch.tensor([0.2, -0.4])
    assert torch.isclose(loss.d_loss(real, fake), 0.5 * ((real - 1) ** 2).mean() + 0.5 * (fake ** 2).mean())
    assert torch.isclose(loss.g_loss(fake), 0.5 * ((fake - 1) ** 2).mean())
    # the optimum: D outputs b on reals and a on fakes; G wins when D says c on fakes
    assert loss.d_loss(torch.ones(4), torch.zeros(4)) == 0
    assert loss.g_loss(torch.ones(4)) == 0


def test_minus_one_one_zero_variant():
    loss = LSGAN(LSGAN.Options(a=-1.0, b=1.0, c=0.0))
    assert loss.d_loss(torch.ones(3), -torch.ones(3)) == 0
    assert loss.g_loss(torch.zeros(3)) == 0
    assert torch.isclose(loss.g_loss(torch.ones(3)), torch.tensor(0.5))


def test_gradients_flow_to_the_logits():
    fake = torch.zeros(4, requires_grad=True)
    LSGAN().g_loss(fake).backward()
    assert torch.allclose(fake.grad, torch.full((4,), -0.25))  # d/dx 0.5*mean((x-1)^2) = (x-1)/N


def test_truncated_normal_init():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 64, 3), nn.Linear(64, 64))
    TruncatedNormal(TruncatedNormal.Options(std=0.02, cutoff=2.0)).apply(net)
    for layer in (net[0], net[1]):
        assert layer.weight.abs().max() <= 0.04 + 1e-7
        assert 0.01 < layer.weight.std() < 0.02
        assert torch.count_nonzero(layer.bias) == 0


def test_trains_with_the_lsgan_loss_and_truncated_normal_init(tmp_path):
    """The installed entry point alone makes both components known to a recipe (no plugins=[...]):
    2 steps of gankit's tiny recipe train with them, and the initializer really ran."""
    run = make_run(tmp_path, overrides=["loss.name=lsgan", "init.name=truncated-normal", "init.std=0.05"])
    assert isinstance(run.loss, LSGAN)
    weights = [p for p in run.D.parameters() if p.dim() > 1]
    assert weights and max(float(w.detach().abs().max()) for w in weights) <= 0.1 + 1e-7  # cutoff 2 x std 0.05
    stats = train_steps(run, 2)
    assert run.step == 2 and math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    assert stats["Loss/D"] >= 0 and stats["Loss/G"] >= 0  # sums of squares


def test_listed_with_its_distribution_by_gankit():
    """`gankit list-plugins` names the distribution that registered each component."""
    r = subprocess.run([sys.executable, "-m", "gan_kit", "list-plugins", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {(row["kind"], row["name"]): row for row in json.loads(r.stdout)}
    version = f"gankit-lsgan {gankit_lsgan.__version__}"
    assert rows[("loss", "lsgan")]["plugin"] == version
    assert rows[("init", "truncated-normal")]["plugin"] == version


def test_recipe_problems_are_reported_with_the_file_and_key(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(textwrap.dedent("""
        [loss]
        name = "lsgan"
        a = 1.0
        [init]
        name = "truncated-normal"
        std = -1
    """))
    with pytest.raises(RecipeError) as e:
        make_run(tmp_path, recipe=path)
    # init.std fails its own check, so the cross-option check of the loss waits for a valid recipe
    assert e.value.problems == [f"{path}: init.std: must be > 0, got -1.0 (e.g. std = 0.02)"]
    path = write_tiny_recipe(tmp_path, "tiny.toml")
    with pytest.raises(RecipeError) as e:
        make_run(tmp_path, recipe=path, overrides=["loss.name=lsgan", "loss.a=1.0"])
    assert e.value.problems == [
        f"{path}: loss.b: must differ from a (both are 1.0): D could not tell real from fake (e.g. a = 0, b = 1)"]
