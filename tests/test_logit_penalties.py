"""LeCam (Tseng et al. 2021, eq. 3) and bCR (Zhao et al. 2021, sec. 3.1): values and gradients
against their formulas, LeCam's EMA anchors (update rule, checkpoint round trip), bCR's
transform, and both in training."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gan_kit import DInputs, GankitError, StepContext
from gan_kit.builtin.objectives.logit_penalties import BalancedConsistency, LeCam, flip_and_translate
from gan_kit.builtin.objectives.losses import Hinge
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.phase import Phase
from gan_kit.recipe import load_recipe


def ctx_for(D=None):
    return StepContext(G=nn.Identity(), D=D or nn.Identity(), opt_G=None, opt_D=None, loss=Hinge(), penalties=[],
                       reals=[torch.zeros(1)], latent=None, phase=Phase(0, 2, 1.0, 2))


def logits_inputs(real, fake, D=None, images=None):
    x = images if images is not None else torch.zeros(real.shape[0], 1, 2, 2)
    return DInputs(D=D or nn.Identity(), real=x, fake=x, real_logits=real, fake_logits=fake)


def test_lecam_value_gradient_and_ema_anchors_follow_the_formula():
    lc = LeCam(LeCam.Options(decay=0.9))
    r1, f1 = torch.tensor([1.0, 3.0]), torch.tensor([-1.0, 0.0])
    # First D objective: the anchors start at this step's means (alpha_R = 2, alpha_F = -0.5).
    v1 = lc(logits_inputs(r1, f1), ctx_for())
    expected = ((r1 + 0.5) ** 2).mean() + ((2.0 - f1) ** 2).mean()
    assert v1.item() == pytest.approx(expected.item()) and lc.alpha_real.item() == pytest.approx(2.0)
    # Second: alpha <- 0.9 * alpha + 0.1 * mean.
    r2 = torch.tensor([0.0, 2.0], requires_grad=True)
    f2 = torch.tensor([1.0, 1.0], requires_grad=True)
    v2 = lc(logits_inputs(r2, f2), ctx_for())
    a_r, a_f = 0.9 * 2.0 + 0.1 * 1.0, 0.9 * -0.5 + 0.1 * 1.0
    assert lc.alpha_real.item() == pytest.approx(a_r) and lc.alpha_fake.item() == pytest.approx(a_f)
    assert v2.item() == pytest.approx((((r2 - a_f) ** 2).mean() + ((a_r - f2) ** 2).mean()).item(), rel=1e-6)
    gr, gf = torch.autograd.grad(v2, [r2, f2])  # anchors detached: d/dr (r - a_F)^2 / N
    assert torch.allclose(gr, (r2.detach() - a_f), atol=1e-6)  # 2 (r - a_F) / 2
    assert torch.allclose(gf, -(a_r - f2.detach()), atol=1e-6)
    assert lc.updates == 2


def test_lecam_one_sided_is_the_authors_relu_form():
    lc = LeCam(LeCam.Options(one_sided=True))
    r, f = torch.tensor([1.0, -3.0]), torch.tensor([2.0, -2.0])  # alpha_R = -1, alpha_F = 0
    v = lc(logits_inputs(r, f), ctx_for())
    assert v.item() == pytest.approx((1.0 ** 2 + 0.0) / 2 + (0.0 + 1.0 ** 2) / 2)


def test_lecam_refuses_a_lazy_step():
    with pytest.raises(GankitError, match="needs the D objective's logits"):
        LeCam()(DInputs(D=nn.Identity(), real=torch.zeros(2, 1, 2, 2), fake=None), ctx_for())


def test_lecam_anchors_round_trip_a_checkpoint(tiny_recipe, tmp_path):
    lecam = ['penalty=[{name="lecam", weight=0.3}]', "loss.name=hinge"]
    recipe, plugins = load_recipe(tiny_recipe, lecam)
    run = build_run(recipe, plugins)
    stats = train(run, max_steps=3)
    assert math.isfinite(stats["Loss/D/lecam"])
    pen = run.penalties[0].penalty
    assert pen.updates == 3 and pen.alpha_real.item() != 0.0
    path = tmp_path / "state.pt"
    torch.save(run.state_dict(), path)
    again = build_run(*load_recipe(tiny_recipe, lecam))
    fresh = again.penalties[0].penalty
    assert fresh.updates == 0
    again.load_state_dict(torch.load(path, weights_only=False))
    assert fresh.updates == 3
    assert torch.equal(fresh.alpha_real, pen.alpha_real.cpu()) and torch.equal(fresh.alpha_fake, pen.alpha_fake.cpu())
    with pytest.raises(GankitError, match="lacks alpha_real"):
        fresh.load_state_dict({"updates": 1})


def test_flip_and_translate_shifts_each_sample_and_reflects_the_border():
    x = torch.arange(2 * 1 * 8 * 8, dtype=torch.float32).reshape(2, 1, 8, 8)
    torch.manual_seed(3)
    y = flip_and_translate(x, False, 0.25)  # shifts in [-2, 2]
    torch.manual_seed(3)
    dy = torch.randint(-2, 3, (2,))
    dx = torch.randint(-2, 3, (2,))
    for n in range(2):
        ref = torch.roll(x[n], (int(dy[n]), int(dx[n])), dims=(1, 2))
        assert torch.equal(y[n, :, 2:-2, 2:-2], ref[:, 2:-2, 2:-2])  # the interior moved as a roll
    assert torch.equal(flip_and_translate(x, False, 0.0), x)
    torch.manual_seed(0)
    flipped = flip_and_translate(x, True, 0.0)
    assert all(torch.equal(flipped[n], x[n]) or torch.equal(flipped[n], x[n].flip(2)) for n in range(2))


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1, 1, 16).reshape(1, 1, 4, 4))

    def forward(self, x):
        return (self.w * x).flatten(1).sum(1)


def test_bcr_is_the_weighted_squared_logit_change_under_t():
    torch.manual_seed(0)
    D = Linear()
    real, fake = torch.randn(3, 1, 4, 4), torch.randn(3, 1, 4, 4)
    inputs = DInputs(D=D, real=real, fake=fake, real_logits=D(real), fake_logits=D(fake))
    pen = BalancedConsistency(BalancedConsistency.Options(real_weight=10.0, fake_weight=2.0, flip=True,
                                                          translation_ratio=0.25))
    torch.manual_seed(5)
    value = pen(inputs, ctx_for(D))
    torch.manual_seed(5)
    t_real = flip_and_translate(real, True, 0.25)
    t_fake = flip_and_translate(fake, True, 0.25)
    expected = 10.0 * ((D(real) - D(t_real)) ** 2).mean() + 2.0 * ((D(fake) - D(t_fake)) ** 2).mean()
    assert value.item() == pytest.approx(expected.item(), rel=1e-5) and value.item() > 0
    (g,) = torch.autograd.grad(value, [D.w])
    (g_ref,) = torch.autograd.grad(expected, [D.w])
    assert torch.allclose(g, g_ref, atol=1e-5)
    still = BalancedConsistency(BalancedConsistency.Options(flip=False, translation_ratio=0.0))
    assert still(inputs, ctx_for(D)).item() == 0.0  # T = identity: nothing to be consistent about


def test_lecam_and_bcr_train_together(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ['penalty=[{name="lecam", weight=0.3}, {name="bcr", weight=1.0}]'])
    stats = train(build_run(recipe, plugins), max_steps=2)
    assert stats["Loss/D/lecam"] > 0 and stats["Loss/D/bcr"] > 0


def test_zcr_terms_are_the_latent_consistency_formulas():
    from gan_kit import GInputs
    from gan_kit.builtin.objectives.logit_penalties import LatentConsistencyD, LatentConsistencyG

    torch.manual_seed(0)
    G = nn.Linear(3, 16)
    gen = lambda z, labels=None: G(z).reshape(-1, 1, 4, 4)  # noqa: E731
    D = Linear()
    ctx = StepContext(G=gen, D=D, opt_G=None, opt_D=None, loss=Hinge(), penalties=[], reals=[torch.zeros(4, 1, 4, 4)],
                      latent=lambda n: torch.randn(n, 3), phase=Phase(0, 4, 1.0, 4))
    torch.manual_seed(1)
    d_value = LatentConsistencyD(LatentConsistencyD.Options(sigma=0.5))(
        DInputs(D=D, real=torch.zeros(4, 1, 4, 4), fake=None), ctx)
    torch.manual_seed(1)
    z = torch.randn(4, 3)
    z2 = z + 0.5 * torch.randn(4, 3)
    with torch.no_grad():
        a, b = gen(z), gen(z2)
    assert d_value.item() == pytest.approx(((D(a) - D(b)) ** 2).mean().item(), rel=1e-5) and d_value.item() > 0
    assert torch.autograd.grad(d_value, [D.w])[0].abs().sum() > 0  # it trains D, and not G (no_grad fakes)
    torch.manual_seed(2)
    g_value = LatentConsistencyG(LatentConsistencyG.Options(sigma=0.5))(GInputs(G=gen, batch_size=4), ctx)
    torch.manual_seed(2)
    z = torch.randn(4, 3)
    z2 = z + 0.5 * torch.randn(4, 3)
    expected = -((gen(z) - gen(z2)) ** 2).flatten(1).sum(1).mean()
    assert g_value.item() == pytest.approx(expected.item(), rel=1e-5) and g_value.item() < 0
    (gw,) = torch.autograd.grad(g_value, [G.weight])
    (gw_ref,) = torch.autograd.grad(expected, [G.weight])
    assert torch.allclose(gw, gw_ref, atol=1e-5)


def test_zcr_trains_with_its_g_term(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ['penalty=[{name="zcr", weight=5.0}, {name="zcr-g", weight=0.5}]'])
    stats = train(build_run(recipe, plugins), max_steps=2)
    assert stats["Loss/D/zcr"] > 0 and stats["Loss/G/zcr-g"] < 0
