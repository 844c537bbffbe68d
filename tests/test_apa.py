"""APA (Jiang et al. 2021, sec. 3): pseudo-reals in D's real batch with probability p, p adapted
by ADA's rule from E[sign(D(real))]; the augment interface's ``reals_for_d`` in the D objective."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from gan_kit import GankitError, Penalty, StepContext, WeightedPenalty
from gan_kit.builtin.augment.apa import AdaptivePseudoAugment
from gan_kit.builtin.objectives.losses import BCE
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.phase import Phase
from gan_kit.recipe import load_recipe


def apa(**options):
    return AdaptivePseudoAugment(AdaptivePseudoAugment.Options(**options))


def test_reals_for_d_takes_the_fake_of_the_same_index_with_probability_p():
    real, fake = torch.randn(64, 1, 2, 2), torch.randn(64, 1, 2, 2)
    assert torch.equal(apa(p_init=0.0).reals_for_d(real, fake), real)
    assert torch.equal(apa(p_init=1.0).reals_for_d(real, fake), fake)
    torch.manual_seed(4)
    mixed = apa(p_init=0.25).reals_for_d(real, fake)
    torch.manual_seed(4)
    pseudo = torch.rand(64) < 0.25
    assert torch.equal(mixed[pseudo], fake[pseudo]) and torch.equal(mixed[~pseudo], real[~pseudo])
    assert 0 < pseudo.sum() < 64
    # Gradients: each output sample's gradient goes to exactly the image it came from.
    r, f = real.clone().requires_grad_(True), fake.clone().requires_grad_(True)
    torch.manual_seed(4)
    gr, gf = torch.autograd.grad(apa(p_init=0.25).reals_for_d(r, f).sum(), [r, f])
    assert torch.equal(gr.flatten(1)[:, 0], (~pseudo).float()) and torch.equal(gf.flatten(1)[:, 0], pseudo.float())


def test_p_follows_adas_rule_clamped_to_a_probability():
    target, interval, kimg, batch = 0.6, 2, 0.2, 16
    aug = apa(target=target, interval=interval, kimg=kimg)
    g = torch.Generator().manual_seed(0)
    p_ref, signs = 0.0, []
    for it in range(1, 81):
        bias = 3.0 if it <= 40 else -3.0
        logits = torch.randn(batch, generator=g) + bias
        aug.feedback(logits)
        signs += torch.sign(logits).tolist()
        stats = aug.end_step(it, batch)
        if it % interval == 0:
            p_ref = min(max(p_ref + np.sign(np.mean(signs) - target) * batch * interval / (kimg * 1000), 0.0), 1.0)
            signs = []
            assert "Augment/rt" in stats
        assert float(aug.p) == pytest.approx(p_ref, abs=1e-5), it
        if it == 40:
            assert float(aug.p) == 1.0  # overfitting: p rose and stopped at 1
    assert float(aug.p) == 0.0
    fixed = apa(target=None, p_init=0.4)
    fixed.feedback(torch.ones(8))
    fixed.end_step(4, 8)
    assert float(fixed.p) == pytest.approx(0.4)


def test_state_round_trips_and_a_foreign_state_is_refused():
    aug = apa(interval=1, kimg=0.01)
    aug.feedback(torch.ones(8))
    aug.end_step(1, 8)
    other = apa()
    other.load_state_dict(aug.state_dict())
    assert torch.equal(other.p, aug.p.cpu()) and float(other.p) > 0
    with pytest.raises(GankitError, match="lacks p"):
        other.load_state_dict({})


class Spy(Penalty):
    seen: list = []

    def __call__(self, inputs, ctx):
        Spy.seen.append(inputs.real)
        return inputs.real_logits.sum() * 0


def test_the_d_objective_loss_penalties_and_feedback_see_the_pseudo_reals():
    torch.manual_seed(0)
    D = nn.Sequential(nn.Flatten(), nn.Linear(4, 1), nn.Flatten(0))
    aug = apa(p_init=1.0)
    real, fake = torch.randn(6, 1, 2, 2), torch.randn(6, 1, 2, 2)
    ctx = StepContext(G=nn.Identity(), D=D, opt_G=None, opt_D=torch.optim.SGD(D.parameters(), lr=0.0), loss=BCE(),
                      penalties=[WeightedPenalty("spy", Spy(), 1.0)], reals=[real], latent=None,
                      phase=Phase(0, 2, 1.0, 6), augment=aug)
    Spy.seen.clear()
    _, stats = ctx.d_objective(real, fake)
    assert stats["Logits/real"].item() == pytest.approx(stats["Logits/fake"].item())  # every real was a fake
    assert torch.equal(Spy.seen[0], fake)
    ctx.opt_step("D")  # the heuristic hears D's logits once D's step is applied
    assert float(aug.adaptive.sign_count) == 6  # the heuristic counted the mixed batch


def test_nan_logits_of_a_step_that_was_not_applied_are_not_counted():
    aug = apa(p_init=0.5)
    aug.feedback(torch.tensor([1.0, -2.0, float("nan"), 3.0]))
    assert float(aug.adaptive.sign_count) == 3 and float(aug.adaptive.sign_sum) == 1.0


def test_apa_trains_the_tiny_recipe(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ['augment={name="apa", p_init=0.5, interval=1}'])
    stats = train(build_run(recipe, plugins), max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and "Augment/p" in stats
