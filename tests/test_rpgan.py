"""The relativistic pairing loss (``rpgan``, R3GAN: Huang et al. 2024, eq. 2): values and
gradients against the formula, refusals, and its real logits in every update strategy."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gan_kit import StepContext
from gan_kit.builtin.objectives.losses import RpGAN
from gan_kit.builtin.objectives.strategies import single_loss_objective
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.phase import Phase
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe


def sp(x: float) -> float:
    return math.log1p(math.exp(x))


def test_rpgan_values_pair_reals_with_fakes_index_by_index():
    real, fake = torch.tensor([2.0, -0.5, 1.0]), torch.tensor([0.5, -3.0, 1.0])
    loss = RpGAN()
    # D: mean softplus(-(r_i - f_i)) over the pairs (1.5, 2.5, 0); G: mean softplus(-(f_i - r_i)).
    assert loss.d_loss(real, fake).item() == pytest.approx((sp(-1.5) + sp(-2.5) + sp(0.0)) / 3, abs=1e-6)
    assert loss.g_loss(fake, real).item() == pytest.approx((sp(1.5) + sp(2.5) + sp(0.0)) / 3, abs=1e-6)
    # Pairing, not averages: permuting the fakes changes the value (RaGAN's means would not).
    assert loss.d_loss(real, fake.flip(0)).item() != pytest.approx(loss.d_loss(real, fake).item(), abs=1e-3)


def test_rpgan_gradients_are_the_formula_in_float64():
    torch.manual_seed(1)
    r = torch.randn(6, dtype=torch.float64, requires_grad=True)
    f = torch.randn(6, dtype=torch.float64, requires_grad=True)
    gr, gf = torch.autograd.grad(RpGAN().d_loss(r, f), [r, f])
    # d/dr softplus(-(r - f)) / N = -sigmoid(-(r - f)) / N; d/df the opposite.
    s = torch.sigmoid(-(r - f)).detach() / 6
    assert torch.allclose(gr, -s, atol=1e-12) and torch.allclose(gf, s, atol=1e-12)
    (gf_g,) = torch.autograd.grad(RpGAN().g_loss(f, r.detach()), [f])
    assert torch.allclose(gf_g, -torch.sigmoid(-(f - r)).detach() / 6, atol=1e-12)
    assert torch.isfinite(RpGAN().d_loss(torch.tensor([1e4]), torch.tensor([-1e4])))
    assert torch.isfinite(RpGAN().g_loss(torch.tensor([-1e4]), torch.tensor([1e4])))


def test_rpgan_refuses_missing_real_logits_and_unpaired_batches():
    with pytest.raises(ValueError, match="needs D's logits on real images"):
        RpGAN().g_loss(torch.zeros(4))
    with pytest.raises(ValueError, match=r"equal batches; got real/fake logits of shapes \(4,\) and \(3,\)"):
        RpGAN().d_loss(torch.zeros(4), torch.zeros(3))
    assert build_plugins(load_entry_points=False).registry.get("loss", "rpgan").factory is RpGAN


class RecordingRpGAN(RpGAN):
    def __init__(self):
        super().__init__()
        self.seen = []

    def g_loss(self, fake_logits, real_logits=None):
        self.seen.append(real_logits)
        return super().g_loss(fake_logits, real_logits)


def test_single_loss_gives_both_g_terms_one_set_of_real_logits():
    # single-loss's stop-gradient bracket g_loss(D(G(z))) - g_loss(D(sg(G(z)))) cancels in D only
    # if both terms see the same real logits; under a random augmentation two forwards on the
    # reals differ, so they are computed once per objective.
    torch.manual_seed(0)
    G, D = nn.Linear(4, 8), nn.Sequential(nn.Flatten(), nn.Linear(8, 1), nn.Flatten(0))
    loss = RecordingRpGAN()
    ctx = StepContext(G=G, D=D, opt_G=torch.optim.SGD(G.parameters(), lr=0.1),
                      opt_D=torch.optim.SGD(D.parameters(), lr=0.1), loss=loss, penalties=[],
                      reals=[torch.randn(5, 8)], latent=lambda n: torch.randn(n, 4), phase=Phase(0, 2, 1.0, 5))
    fake = ctx.G(torch.randn(5, 4))
    _, g_term, _ = single_loss_objective(ctx, ctx.reals[0], fake)
    assert len(loss.seen) == 2 and loss.seen[0] is loss.seen[1] and not loss.seen[0].requires_grad
    grads = torch.autograd.grad(g_term, list(D.parameters()), retain_graph=True)
    assert max(g.abs().max().item() for g in grads) <= 1e-7 and g_term.item() == 0.0


@pytest.mark.parametrize("strategy", ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"])
def test_rpgan_trains_under_every_strategy(tiny_recipe, strategy):
    recipe, plugins = load_recipe(tiny_recipe, [f"update.name={strategy}", "loss.name=rpgan", "penalty=[]"])
    run = build_run(recipe, plugins)
    stats = train(run, max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
