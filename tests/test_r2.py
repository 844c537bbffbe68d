"""Zero-centred R2 on fakes (Mescheder et al. 2018, eq. 10) and R1 + R2 together as R3GAN uses
them (Huang et al. 2024, sec. 2.3): values and gradients against the formula, the lazy step that
draws its own fakes, and lazy R1 + R2 sharing one D optimizer step."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gan_kit import DInputs, StepContext, WeightedPenalty
from gan_kit.builtin.objectives.losses import Hinge
from gan_kit.builtin.objectives.penalties import R1, R2
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.phase import Phase
from gan_kit.recipe import load_recipe


class Quadratic(nn.Module):
    """D(x) = 0.5 * sum(W * x^2) per sample: grad_x D = W * x."""

    def __init__(self, shape, dtype=torch.float32):
        super().__init__()
        self.W = nn.Parameter(torch.linspace(0.5, 2.0, math.prod(shape), dtype=dtype).reshape(shape))

    def forward(self, x):
        return 0.5 * (self.W * x.square()).flatten(1).sum(1)


def ctx_for(D, real, generate=None):
    return StepContext(G=generate or nn.Identity(), D=D, opt_G=None, opt_D=None, loss=Hinge(), penalties=[],
                       reals=[real], latent=lambda n: torch.randn(n, 3), phase=Phase(0, 2, 1.0, 2))


def test_r2_is_half_the_mean_squared_input_gradient_on_the_fakes():
    torch.manual_seed(0)
    D = Quadratic((1, 2, 2))
    real, fake = torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2)
    inputs = DInputs(D=D, real=real, fake=fake)
    value = R2()(inputs, ctx_for(D, real))
    expected = 0.5 * (D.W * fake).flatten(1).square().sum(1).mean()
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    assert value.item() != pytest.approx(R1()(inputs, ctx_for(D, real)).item(), rel=1e-3)  # not on the reals
    # d/dW 0.5 * mean_i sum (W x_i)^2 = W * mean_i x_i^2
    (gw,) = torch.autograd.grad(value, [D.W])
    assert torch.allclose(gw, D.W.detach() * fake.square().mean(0), atol=1e-6)


def test_r2_in_a_lazy_step_draws_fakes_from_g_without_gradient():
    torch.manual_seed(0)
    G = nn.Linear(3, 4)
    D = Quadratic((1, 2, 2))
    real = torch.randn(5, 1, 2, 2)
    ctx = ctx_for(D, real, generate=lambda z: G(z).reshape(-1, 1, 2, 2))
    torch.manual_seed(7)
    value = R2()(DInputs(D=D, real=real, fake=None), ctx)
    torch.manual_seed(7)
    with torch.no_grad():
        fake = G(torch.randn(5, 3)).reshape(-1, 1, 2, 2)
    assert value.item() == pytest.approx(0.5 * (D.W * fake).flatten(1).square().sum(1).mean().item(), rel=1e-6)
    assert torch.autograd.grad(value, [D.W])[0].abs().sum() > 0
    with pytest.raises(RuntimeError):  # no graph to G: the fakes were made under no_grad
        torch.autograd.grad(value, list(G.parameters()))


R1R2 = ('penalty=[{name="r1", weight=0.5, interval=INTERVAL}, {name="r2", weight=0.5, interval=INTERVAL}]')


@pytest.mark.parametrize("interval", [1, 2])
def test_r1_plus_r2_train_together_and_lazily_share_one_d_step(tiny_recipe, interval):
    recipe, plugins = load_recipe(tiny_recipe, ["loss.name=rpgan", R1R2.replace("INTERVAL", str(interval))])
    run = build_run(recipe, plugins)
    steps = []
    original = run.opt_D.step

    def counted(*a, **k):
        steps.append(run.step)
        return original(*a, **k)

    run.opt_D.step = counted
    stats = train(run, max_steps=4)
    assert stats["Loss/D/r1"] > 0 and stats["Loss/D/r2"] > 0
    if interval == 1:
        assert len(run.lazy_penalties) == 0 and len(steps) == 4
    else:
        # iterations 0 and 2 add ONE regularisation step for both penalties: 4 + 2 D steps, so
        # the k/(k+1) Adam correction (one extra step per k iterations) is right.
        assert len(run.lazy_penalties) == 2 and len(steps) == 6
        assert run.optimizers.lazy_ratio("D") == pytest.approx(2 / 3)


class Counting(Quadratic):
    """Quadratic D that counts its forwards and the images they saw."""

    def __init__(self, shape):
        super().__init__(shape)
        self.images: list[int] = []

    def forward(self, x, splits=1):  # per sample: joint forwards split anywhere
        self.images.append(x.shape[0])
        return super().forward(x)


@pytest.mark.parametrize("joint", [True, False])
def test_every_step_r1_and_r2_take_their_gradients_from_the_objectives_forward(joint):
    """R1 and R2 in the D objective add no D forward: the objective's own forward (joint on
    reals and fakes, or one each) gives both input gradients, with the values of the formula."""
    torch.manual_seed(0)
    D = Counting((1, 2, 2))
    real, fake = torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2)
    ctx = ctx_for(D, real)
    ctx.penalties = [WeightedPenalty("r1", R1(), 1.0), WeightedPenalty("r2", R2(), 1.0)]
    ctx.joint_d_forward = joint
    _, stats = ctx.d_objective(real, fake)
    assert sum(D.images) == 6 and len(D.images) == (1 if joint else 2)
    for key, x in (("Loss/D/r1", real), ("Loss/D/r2", fake)):
        expected = 0.5 * (D.W * x).flatten(1).square().sum(1).mean()
        assert stats[key].item() == pytest.approx(expected.item(), rel=1e-6), key


def test_r1_alone_keeps_a_joint_d_objective_split_so_its_graph_covers_the_reals_only():
    torch.manual_seed(0)
    D = Counting((1, 2, 2))
    real, fake = torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2)
    ctx = ctx_for(D, real)
    ctx.penalties = [WeightedPenalty("r1", R1(), 1.0)]
    ctx.joint_d_forward = True
    ctx.d_objective(real, fake)
    assert D.images == [3, 3]
