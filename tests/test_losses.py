"""Adversarial losses on fixed logits: hand-computed values, finiteness at +-1e4, and the wgan-gp preset."""

from __future__ import annotations

import math

import pytest
import torch

from gan_kit.builtin.objectives.losses import BCE, WGAN, WGANGP, BCEMinimax, Hinge
from gan_kit.base.errors import RecipeError
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe

REAL = torch.tensor([2.0, -0.5])
FAKE = torch.tensor([0.5, -3.0])


def sp(x: float) -> float:
    """softplus written out: log(1 + e^x)."""
    return math.log(1.0 + math.exp(x))


# (loss, expected d_loss(REAL, FAKE), expected g_loss(FAKE)), worked by hand from the formulas.
EXPECTED = {
    # D: mean(relu(1 - [2, -0.5])) + mean(relu(1 + [0.5, -3])) = (0 + 1.5)/2 + (1.5 + 0)/2
    # G: -mean([0.5, -3]) = 1.25
    "hinge": (Hinge, 1.5, 1.25),
    # D: mean(log(1 + e^-x_real)) + mean(log(1 + e^x_fake)); G: mean(log(1 + e^-x_fake))
    "bce": (BCE, (sp(-2.0) + sp(0.5)) / 2 + (sp(0.5) + sp(-3.0)) / 2, (sp(-0.5) + sp(3.0)) / 2),
    # G minimises log(1 - sigmoid(x_fake)) = -log(1 + e^x_fake)
    "bce-minimax": (BCEMinimax, (sp(-2.0) + sp(0.5)) / 2 + (sp(0.5) + sp(-3.0)) / 2, -(sp(0.5) + sp(-3.0)) / 2),
    # D: mean(fake) - mean(real) = -1.25 - 0.75; G: -mean(fake)
    "wgan": (WGAN, -2.0, 1.25),
    "wgan-gp": (WGANGP, -2.0, 1.25),
}


def test_hand_computed_numbers_are_what_they_claim():
    # Guard against a typo in the table: the bce numbers to 6 places, computed on paper.
    assert EXPECTED["bce"][1] == pytest.approx(0.126928 / 2 + 0.974077 / 2 + 0.974077 / 2 + 0.048587 / 2, abs=2e-6)
    assert EXPECTED["bce"][2] == pytest.approx((0.474077 + 3.048587) / 2, abs=2e-6)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_loss_values_on_fixed_logits(name):
    cls, d_expected, g_expected = EXPECTED[name]
    loss = cls()
    assert loss.d_loss(REAL, FAKE).item() == pytest.approx(d_expected, abs=1e-6)
    assert loss.g_loss(FAKE).item() == pytest.approx(g_expected, abs=1e-6)
    assert loss.g_loss(FAKE, REAL).item() == pytest.approx(g_expected, abs=1e-6)  # real logits unused


def test_every_loss_is_registered_under_its_name():
    registry = build_plugins(load_entry_points=False).registry
    for name, (cls, _, _) in EXPECTED.items():
        assert registry.get("loss", name).factory is cls


@pytest.mark.parametrize("name", list(EXPECTED))
def test_losses_and_gradients_finite_at_extreme_logits(name):
    loss = EXPECTED[name][0]()
    for r, f in ((1e4, -1e4), (-1e4, 1e4), (1e4, 1e4), (-1e4, -1e4)):
        real = torch.full((3,), r, requires_grad=True)
        fake = torch.full((3,), f, requires_grad=True)
        d = loss.d_loss(real, fake)
        g = loss.g_loss(fake)
        gr, gf = torch.autograd.grad(d, (real, fake))
        (gg,) = torch.autograd.grad(g, fake)
        for t in (d, g, gr, gf, gg):
            assert torch.isfinite(t).all(), (name, r, f)


def test_extreme_logit_values_are_the_linear_asymptotes():
    # softplus(x) -> x for large x and -> 0 for very negative x, without overflow (log-sum-exp form).
    real, fake = torch.tensor([-1e4]), torch.tensor([1e4])
    assert BCE().d_loss(real, fake).item() == pytest.approx(2e4)
    assert BCE().d_loss(fake, real).item() == 0.0
    assert BCE().g_loss(real).item() == pytest.approx(1e4)
    assert BCEMinimax().g_loss(fake).item() == pytest.approx(-1e4)
    assert Hinge().d_loss(real, fake).item() == pytest.approx(2e4 + 2)


def test_wgan_gp_preset_adds_pggan_penalties():
    assert WGANGP().implied_penalties() == [("gradient-penalty", 10.0, {}), ("drift", 0.001, {})]


def test_wgan_gp_with_an_explicit_gradient_penalty_is_rejected(tiny_recipe):
    # tiny_recipe lists [[penalty]] gradient-penalty; with wgan-gp it would be applied twice.
    with pytest.raises(RecipeError, match=r"penalty\[0\]\.name: 'gradient-penalty' is already part of loss 'wgan-gp'"):
        load_recipe(tiny_recipe, ["loss.name=wgan-gp"])
