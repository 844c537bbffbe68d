"""D regularisers: gradient-penalty norm per sample over C, H, W together, finite at zero
gradient, the target option, r1 with lazy interval, drift."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gan_kit.builtin.objectives.losses import Hinge
from gan_kit.builtin.objectives.penalties import Drift, GradientPenalty, R1
from gan_kit import DInputs, StepContext, WeightedPenalty
from gan_kit.base.phase import Phase


def context(D, real, penalties=()):
    return StepContext(G=nn.Identity(), D=D, opt_G=None, opt_D=None, loss=Hinge(), penalties=list(penalties),
                       reals=[real], latent=None, phase=Phase(0, 2, 1.0, 2))


def call(penalty, D, real, fake):
    """``penalty`` as the D objective calls it: with D's logits on both batches."""
    inputs = DInputs(D=D, real=real, fake=fake, real_logits=D(real).float(), fake_logits=D(fake).float())
    return penalty(inputs, context(D, real))


class Quadratic(nn.Module):
    """D(x) = 0.5 * sum(W * x^2) per sample, so grad_x D = W * x (known per sample)."""

    def __init__(self, shape):
        super().__init__()
        self.W = nn.Parameter(torch.ones(shape))

    def forward(self, x):
        return 0.5 * (self.W * x.square()).flatten(1).sum(1)


class ZeroGrad(nn.Module):
    """D(x) = w * sum(x - x) + b: its input gradient is exactly zero."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(2.0))
        self.b = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return self.w * (x - x).flatten(1).sum(1) + self.b


def two_channel_images():
    """[2, 2, 2, 2]: sample 0 has channel norms 1 and 2 (sample norm sqrt 5), sample 1 has 0 and 3."""
    x = torch.zeros(2, 2, 2, 2)
    x[0, 0], x[0, 1] = 0.5, 1.0
    x[1, 1] = 1.5
    return x


def test_gradient_penalty_norm_is_per_sample_over_all_non_batch_dims():
    x = two_channel_images()
    D = Quadratic((2, 2, 2))
    # real == fake, so every interpolate is x itself whatever the random weights.
    gp = call(GradientPenalty(), D, x, x).item()
    per_sample = ((math.sqrt(5) - 1) ** 2 + (3 - 1) ** 2) / 2
    per_channel = ((1 - 1) ** 2 + (2 - 1) ** 2 + (0 - 1) ** 2 + (3 - 1) ** 2) / 4
    whole_batch = (math.sqrt(14) - 1) ** 2
    assert gp == pytest.approx(per_sample, abs=1e-5)
    assert abs(per_sample - per_channel) > 1 and abs(per_sample - whole_batch) > 1


def test_gradient_penalty_target_option():
    x = two_channel_images()
    gp = call(GradientPenalty(GradientPenalty.Options(target=2.0)), Quadratic((2, 2, 2)), x, x).item()
    assert gp == pytest.approx(((math.sqrt(5) - 2) ** 2 + (3 - 2) ** 2) / 2, abs=1e-5)


def test_gradient_penalty_interpolates_per_sample_between_real_and_fake():
    seen = []

    class Spy(Quadratic):
        def forward(self, x):
            seen.append(x.detach().clone())
            return super().forward(x)

    torch.manual_seed(3)
    real, fake = torch.randn(6, 2, 3, 3), torch.randn(6, 2, 3, 3)
    call(GradientPenalty(), Spy((2, 3, 3)), real, fake)
    x_hat = seen[-1]  # after D's forwards on the reals and fakes (the D objective's)
    eps = ((x_hat - fake) / (real - fake)).flatten(1)  # one mixing weight per sample
    assert torch.allclose(eps, eps[:, :1].expand_as(eps), atol=1e-4)
    assert ((eps >= 0) & (eps <= 1)).all() and eps[:, 0].std() > 0.05


def test_gradient_penalty_finite_when_d_gradient_is_zero():
    D = ZeroGrad()
    x = torch.randn(4, 1, 2, 2)
    gp = call(GradientPenalty(), D, x, x + 1)
    assert gp.item() == pytest.approx(1.0, abs=1e-5)  # (0 - 1)^2
    grads = torch.autograd.grad(gp, list(D.parameters()), allow_unused=True)
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    # Without the epsilon inside the square root the same penalty's gradient is NaN.
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(D(xg).sum(), xg, create_graph=True)
    naive = (g.flatten(1).square().sum(1).sqrt() - 1).square().mean()
    (dw,) = torch.autograd.grad(naive, D.w)
    assert torch.isnan(dw)


def test_gradient_penalty_is_float32_for_bf16_images():
    x = two_channel_images()
    gp = call(GradientPenalty(), Quadratic((2, 2, 2)), x.bfloat16(), x.bfloat16())
    assert gp.dtype == torch.float32


def test_r1_value_is_unscaled_by_its_interval():
    x = two_channel_images()
    D = Quadratic((2, 2, 2))
    # 0.5 * E||W x||^2 = 0.5 * (5 + 9) / 2; the engine, not the penalty, applies the lazy gain
    assert call(R1(), D, x, x).item() == pytest.approx(3.5, abs=1e-5)
    lazy = R1(R1.Options(interval=4))
    assert lazy.interval == 4 and call(lazy, D, x, x).item() == pytest.approx(3.5, abs=1e-5)


def test_drift_reuses_the_d_objectives_real_logits():
    x = two_channel_images()
    calls = []

    class Counting(Quadratic):
        def forward(self, x):
            calls.append(1)
            return super().forward(x)

    D = Counting((2, 2, 2))  # logits 0.5 * [5, 9]
    ctx = context(D, x, [WeightedPenalty("drift", Drift(), 0.5)])
    total, stats = ctx.d_objective(x, torch.zeros_like(x))
    assert stats["Loss/D/drift"].item() == pytest.approx((2.5**2 + 4.5**2) / 2)
    assert len(calls) == 2  # D on the reals and on the fakes only: the drift term ran no forward
    # its gradient reaches D's weights through the shared logits
    grads = torch.autograd.grad(total, [D.W])
    assert torch.isfinite(grads[0]).all() and grads[0].abs().sum() > 0


def test_d_objective_adds_weighted_penalties():
    x = two_channel_images()
    D = Quadratic((2, 2, 2))
    fake = torch.zeros_like(x)
    ctx = context(D, x, [WeightedPenalty("r1", R1(), 10.0), WeightedPenalty("drift", Drift(), 0.5)])
    # hinge: mean(relu(1 - [2.5, 4.5])) + mean(relu(1 + [0, 0])) = 1
    total, stats = ctx.d_objective(x, fake)
    r1, drift = 0.5 * (5 + 9) / 2, (2.5**2 + 4.5**2) / 2
    assert total.item() == pytest.approx(1 + 10 * r1 + 0.5 * drift, abs=1e-4)
    assert stats["Loss/D/r1"].item() == pytest.approx(r1, abs=1e-5)
    assert stats["Loss/D/drift"].item() == pytest.approx(drift, abs=1e-5)


def test_a_penalty_that_returns_no_scalar_is_named_in_one_line():
    from gan_kit import GankitError, Penalty

    class PerSample(Penalty):
        def __call__(self, inputs, ctx):
            return inputs.real_logits.square()  # forgot the .mean()

    x = two_channel_images()
    ctx = context(Quadratic((2, 2, 2)), x, [WeightedPenalty("per-sample", PerSample(), 1.0)])
    with pytest.raises(GankitError, match=r"^penalty 'per-sample' returned a tensor of shape \(2,\); it must return "
                                          r"a scalar tensor \(e\.g\. end with \.mean\(\)\)$"):
        ctx.d_objective(x, torch.zeros_like(x))
