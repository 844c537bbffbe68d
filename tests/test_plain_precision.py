"""Plugin code written in plain float32 PyTorch - no ``ctx.autocast()``, no ``.float()`` - trains
under fp32, bf16 and fp16: the networks gankit hands out run their forwards at the
run's precision and return float32 (``gan_kit.training.networks.AtPrecision``), penalties receive
float32 images, and the verbs backpropagate outside autocast (PyTorch's AMP recipe)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import Penalty, StepContext, UpdateStrategy, hookimpl
from gan_kit.testing import make_run, train_steps


class PlainFlip(Penalty):
    """D should score a flipped fake like the fake (the shape of the reported case)."""

    def __call__(self, inputs, ctx):
        x = inputs.fake.detach()
        return (inputs.D(torch.flip(x, dims=[3])) - inputs.D(x)).square().mean()


class PlainLazyR1(Penalty):
    """R1 by hand with torch.autograd.grad, lazy (every 2nd iteration): inputs.fake is None here."""

    interval = 2

    def __call__(self, inputs, ctx):
        x = inputs.real.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(inputs.D(x).sum(), x, create_graph=True)
        return grad.square().sum(dim=[1, 2, 3]).mean()


class PlainGSpread(Penalty):
    """A G penalty running G itself and mixing its output with the handed fakes."""

    network = "G"

    def __call__(self, inputs, ctx):
        other = inputs.G(torch.randn(inputs.batch_size, ctx.latent(1).shape[1]))
        return torch.lerp(inputs.fake, other, 0.5).square().mean()


class PlainStrategy(UpdateStrategy):
    """Calls ctx.G / ctx.D directly, makes a WGAN-GP style interpolate with torch.lerp, and
    computes its losses with plain softplus."""

    def step(self, ctx):
        real = ctx.reals[0]
        n = real.shape[0]
        fake = ctx.G(ctx.latent(n))
        eps = ctx.batch_rand(n, 1, 1, 1)
        mixed = torch.lerp(real, fake.detach(), eps)
        d_total, d_stats = ctx.d_objective(real, fake.detach())  # with the D penalties
        d_loss = d_total + F.softplus(-ctx.D(real)).mean() + F.softplus(ctx.D(mixed)).mean()
        ctx.zero_grad("D")
        ctx.backward(d_loss, "D")
        ctx.opt_step("D")
        with ctx.frozen("D"):
            g_total, g_stats = ctx.g_objective(ctx.D(fake), fake)
            ctx.zero_grad("G")
            ctx.backward(g_total, "G")
        ctx.opt_step("G")
        return {**d_stats, **g_stats, "Plain/fake_dtype": float(fake.dtype == torch.float32)}


class _Plugin:
    @hookimpl
    def register_penalties(self, register):
        register("plain-flip", PlainFlip)
        register("plain-lazy-r1", PlainLazyR1)
        register("plain-g-spread", PlainGSpread)

    @hookimpl
    def register_update_strategies(self, register):
        register("plain-strategy", PlainStrategy)


PENALTIES = ('penalty=[{name="plain-flip", weight=1.0}, {name="plain-lazy-r1", weight=1.0}, '
             '{name="plain-g-spread", weight=0.1}]')


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("update", ["d-then-g", "plain-strategy"])
def test_plain_penalties_and_strategy_train_under_every_precision(tmp_path, precision, update):
    run = make_run(tmp_path, plugins=[_Plugin()], overrides=[f"run.precision={precision}", f"update.name={update}",
                                                          PENALTIES, "growth.fade_kimg=0.008"])
    before = {net: [p.detach().clone() for p in getattr(run, net).parameters()] for net in ("G", "D")}
    stats = train_steps(run, 3)  # iterations 0 and 2 run the lazy R1
    assert run.step == 3 and run.skipped_steps == 0
    for key in ("Loss/D", "Loss/G", "Loss/D/plain-flip", "Loss/D/plain-lazy-r1", "Loss/G/plain-g-spread"):
        assert math.isfinite(stats[key]), (key, stats)
    assert stats["Loss/D/plain-lazy-r1"] > 0
    if update == "plain-strategy":
        assert stats["Plain/fake_dtype"] == 1.0  # what plugin code sees is float32 at every precision
    assert stats["Loss/D/plain-flip"] > 0
    for net in ("G", "D"):
        after = list(getattr(run, net).parameters())
        assert all(torch.isfinite(p).all() for p in after)
        assert any(not torch.equal(p.detach(), b) for p, b in zip(after, before[net])), net


def test_networks_handed_out_run_at_the_run_precision_and_return_float32(tmp_path):
    run = make_run(tmp_path, overrides=["run.precision=bf16"])
    run.set_phase(run.growth.phase_at(0))
    seen = []
    hook = run.D.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    logits = run.D_train(torch.randn(4, 1, 4, 4))
    hook.remove()
    assert seen == [torch.bfloat16] and logits.dtype == torch.float32
    assert run.G_train(run.latent(4)).dtype == torch.float32
    assert run.G_penalty.set_phase == run.G.set_phase  # attributes the wrapper lacks are the network's


def test_an_optimizer_step_inside_an_autocast_block_is_seen_by_the_next_forward():
    """Autocast casts each weight once per outermost block; ``ctx.opt_step`` drops those copies,
    so a plugin whose ``with ctx.autocast():`` spans a step does not run on the old weights."""
    torch.manual_seed(0)
    D = nn.Linear(4, 1)
    opt = torch.optim.SGD(D.parameters(), lr=1.0)
    x = torch.randn(3, 4)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    ctx = StepContext(G=nn.Identity(), D=D, opt_G=opt, opt_D=opt, loss=None, penalties=[], reals=[x],
                      latent=None, phase=None, autocast=autocast)
    with ctx.autocast():
        before = D(x)
        ctx.zero_grad("D")
        ctx.backward(before.float().sum(), "D")
        ctx.opt_step("D")
        inside = D(x)
    with autocast():
        fresh = D(x)
    assert not torch.equal(before, fresh)
    torch.testing.assert_close(inside, fresh, rtol=0, atol=0)
