"""Mixed precision: fp16 with a GradScaler and a gradient penalty; penalty gradients scaled
before autograd.grad and unscaled after."""

from __future__ import annotations

import math

import pytest

import torch
from torch import nn

from gan_kit.runs import checkpoint as ckpt
from gan_kit import StepContext
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.recipe import load_recipe


def input_gradients(D, x, scaler):
    ctx = StepContext(G=nn.Identity(), D=D, opt_G=None, opt_D=None, loss=None, penalties=[], reals=[x],
                      latent=None, phase=None, scaler=scaler)
    return ctx.input_gradients(D, x)


def test_penalty_gradients_are_unscaled_after_a_scaled_autograd_grad():
    torch.manual_seed(0)
    D = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    x = torch.randn(5, 3, 2, 2)
    plain = input_gradients(D, x, None)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**14)
    scaled = input_gradients(D, x, scaler)
    torch.testing.assert_close(scaled, plain, rtol=1e-6, atol=1e-7)
    assert scaled.dtype == torch.float32
    # and the penalty built on it backpropagates to D's weights identically (scaled total loss)
    (plain.square().sum()).backward()
    ref = [p.grad.clone() for p in D.parameters()]
    # the last bias does not affect input gradients: it joins the graph through logits * 0, grad 0
    # (and the first bias only picks the leaky ReLU's slopes: zero too; the weights are not)
    assert torch.count_nonzero(ref[-1]) == 0 and all(torch.count_nonzero(ref[i]) > 0 for i in (0, 2))
    D.zero_grad()
    scaled = input_gradients(D, x, scaler)
    scaler.scale(scaled.square().sum()).backward()
    for p, r in zip(D.parameters(), ref):
        if r is not None:
            torch.testing.assert_close(p.grad / scaler.get_scale(), r, rtol=1e-5, atol=1e-6)


def test_fp16_with_gradscaler_and_gradient_penalty_trains_without_scale_collapse(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ["run.precision=fp16", "run.total_kimg=0.12"])
    run = build_run(recipe, plugins)
    assert run.scaler is not None
    stats = train(run)
    scale = run.scaler.get_scale()
    assert scale >= 1.0, scale  # it may back off from 65536 on early overflows, never collapse
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/D/gradient-penalty"])
    assert run.skipped_steps == 0
    for p in list(run.G.parameters()) + list(run.D.parameters()):
        assert torch.isfinite(p).all()
    saved = ckpt.load(run.out_dir / "checkpoints" / "latest.pt")
    assert saved["scaler"]["scale"] == scale  # the scaler state travels with the checkpoint


@pytest.mark.parametrize("strategy", ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"])
def test_fp16_with_two_critic_steps_updates_the_scaler_between_d_steps(tiny_recipe, strategy):
    """GradScaler allows one step per optimizer between updates; with d_steps = 2, D steps twice
    an iteration, so the scaler is updated after the first critic step too: two updates per
    iteration, every D and G step taken."""
    recipe, plugins = load_recipe(tiny_recipe, ["run.precision=fp16", f"update.name={strategy}",
                                                "update.d_steps=2", "growth.batch_size=4",
                                                "architecture.mbstd_group_size=2"])
    run = build_run(recipe, plugins)
    updates, steps = [], []
    real_update, real_step = run.scaler.update, run.scaler.step
    run.scaler.update = lambda *a: (updates.append(1), real_update(*a))
    run.scaler.step = lambda opt: (steps.append("D" if opt is run.opt_D else "G"), real_step(opt))
    before = [p.detach().clone() for p in list(run.G.parameters()) + list(run.D.parameters())]
    train(run, max_steps=3)
    assert len(updates) == 6
    after = list(run.G.parameters()) + list(run.D.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert steps.count("D") == 6 and steps.count("G") == 3  # (a step with inf gradients is skipped inside)
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


#: A tiny StyleGAN3-T and -R on the tiny recipe's digits (8 px, 4 synthesis layers, lazy R1, D's
#: blur fading over the 4 steps).
SG3 = ["architecture={name='stylegan3', latent_dim=8, w_dim=8, channel_base=64, channel_max=8, num_layers=4, "
       "d_blur_sigma={schedule='linear', start=1.0, end=0.0, kimg=0.032}}", "growth={name='static', batch_size=8}",
       "loss.name=bce", "penalty=[{name='r1', weight=1.0, interval=2}]"]


@pytest.mark.parametrize("arch", [[], SG3, [*SG3, "architecture.config=r"]], ids=["pggan", "stylegan3-t", "stylegan3-r"])
def test_bf16_on_the_cpu_changes_the_numbers_but_stays_close_to_fp32(tmp_path, arch):
    # bf16 autocast is a speed option that alters the math (docs/performance.md): the weights
    # after a few steps differ from fp32's, by about bf16's precision, and the losses agree.
    from gan_kit.testing import make_run, train_steps

    out = {}
    for precision in ("fp32", "bf16"):
        run = make_run(tmp_path / precision, overrides=[*arch, f"run.precision={precision}", "run.total_kimg=0.032"])
        stats = train_steps(run, 4)
        assert all(torch.isfinite(p).all() for net in (run.G, run.D, run.G_ema) for p in net.state_dict().values())
        out[precision] = ({k: v.detach().clone() for k, v in run.G.named_parameters()}, stats)
    (a, sa), (b, sb) = out["fp32"], out["bf16"]
    weights = list(a)
    diffs = [float((a[k] - b[k]).abs().max()) for k in weights]
    assert max(diffs) > 1e-4  # not the fp32 numbers
    assert max(diffs) < 2e-2  # 4 Adam steps of lr 1e-3: each weight moved by < 4e-3 either way
    for key in ("Loss/D", "Loss/G"):
        assert abs(sa[key] - sb[key]) < 0.05, key
