"""State a penalty or augmentation keeps across iterations (path length's running mean, ADA's
sign statistics and p) changes only with optimizer steps that are applied: an fp16 step the
GradScaler skips for an overflow leaves no trace, and no host sync is added for it. Real fp16
autocast and GradScaler on the CPU (as every fp16 test here runs), a tiny StyleGAN2."""

from __future__ import annotations

import math

import attrs
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gan_kit.runs.engine import real_loader, train_step
from gan_kit.training.step import StepContext
from gan_kit.testing import make_run

SG2 = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8}",
       "data.resolution=16", "growth={name='static', batch_size=8}", "loss.name=bce", "run.precision=fp16",
       "penalty=[{name='r1', weight=1.0, interval=2}, {name='path-length', weight=2.0, interval=2}]",
       "augment={name='ada', interval=1000, p_init=0.2}"]


def _state(run) -> dict[str, torch.Tensor]:
    pl = next(wp.penalty for wp in run.lazy_penalties if wp.name == "path-length")
    ada = run.augment
    return {"pl_mean": pl.pl_mean.detach().cpu().clone(), "p": ada.p.detach().cpu().clone(),
            "sign_sum": ada.adaptive.sign_sum.detach().cpu().clone(), "sign_count": ada.adaptive.sign_count.detach().cpu().clone()}


def _step(run, batches):
    phase = run.growth.phase_at(run.cur_nimg)
    run.set_phase(phase)
    return train_step(run, phase, next(batches))


def test_a_step_the_fp16_scaler_skips_leaves_path_length_and_ada_state_as_it_was(tmp_path):
    run = make_run(tmp_path, overrides=SG2)
    assert run.scaler is not None
    batches = iter(real_loader(run))
    # A lower first scale than the default 65536, which overflows the first path-length step here.
    run.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    _step(run, batches)  # iterations 0 and 1; path length runs at even ones
    _step(run, batches)
    before = _state(run)
    assert before["sign_count"] > 0 and before["pl_mean"] > 0
    # A loss scale no fp16 gradient survives: every optimizer step of the iteration overflows and
    # the scaler skips it (its scale halves), as the first steps of an fp16 run do.
    run.scaler.update(2.0 ** 120)
    weights = [p.detach().clone() for p in run.G.parameters()]
    _step(run, batches)
    assert run.scaler.get_scale() < 2.0 ** 120  # skipped
    assert all(torch.equal(a, b) for a, b in zip(weights, run.G.parameters()))  # no update of G ...
    after = _state(run)
    for key, value in before.items():
        assert torch.equal(after[key], value), f"{key}: {value} -> {after[key]} on a skipped step"
    # ... and the next applied steps move them again, finite.
    run.scaler.update(2.0 ** 8)
    _step(run, batches)
    _step(run, batches)  # iteration 4: path length again
    assert run.scaler.get_scale() >= 2.0 ** 8
    moved = _state(run)
    assert moved["pl_mean"] != before["pl_mean"] and math.isfinite(float(moved["pl_mean"]))
    assert moved["sign_count"] == before["sign_count"] + 16  # two applied D steps' 8 real logits each


class _CountSyncs(TorchDispatchMode):
    """Counts device-to-host reads of a tensor's value (``.item()``, ``bool(t)``, ``float(t)``)."""

    def __init__(self):
        super().__init__()
        self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.syncs += 1
        return func(*args, **(kwargs or {}))


def _ctx_with_scaler(scale: float) -> StepContext:
    G, D = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    return StepContext(G=G, D=D, opt_G=torch.optim.Adam(G.parameters()), opt_D=torch.optim.Adam(D.parameters()),
                       loss=None, penalties=[], reals=[torch.randn(8, 4)], latent=lambda n: torch.randn(n, 4),
                       phase=None, scaler=torch.amp.GradScaler("cpu", init_scale=scale))


class _Owner:
    def __init__(self):
        self.mean = torch.zeros(())


def _d_step(ctx: StepContext, owner: _Owner | None, overflow: bool) -> int:
    """One iteration's D step under the scaler (a fresh context each, as the engine makes), staging
    ``owner.mean += 1`` when ``owner`` is given; returns the host syncs of ``opt_step``."""
    ctx = attrs.evolve(ctx)
    ctx.zero_grad("D")
    x = ctx.reals[0] * (1e30 if overflow else 1.0)
    ctx.backward(ctx.D(x).square().mean(), "D")
    if owner is not None:
        ctx.stage("D", owner, "mean", owner.mean + 1)
    with _CountSyncs() as mode:
        ctx.opt_step("D")
    ctx.scaler.update()
    return mode.syncs


def test_staged_state_commits_on_applied_steps_only_and_adds_no_host_sync():
    """``ctx.stage`` under a GradScaler: committed when the step is applied, dropped when the
    scaler skips it (overflow), with as many host syncs in ``opt_step`` as without staged state
    (the verdict is a device tensor, applied with torch.where)."""
    ctx, owner = _ctx_with_scaler(2.0 ** 8), _Owner()
    applied = _d_step(ctx, None, overflow=False)
    assert _d_step(ctx, owner, overflow=False) == applied and float(owner.mean) == 1.0
    skipped = _d_step(ctx, None, overflow=True)
    scale = ctx.scaler.get_scale()
    assert _d_step(ctx, owner, overflow=True) == skipped and float(owner.mean) == 1.0  # skipped: kept
    assert ctx.scaler.get_scale() < scale
    assert _d_step(ctx, owner, overflow=False) == applied and float(owner.mean) == 2.0
    # Without a scaler an applied step commits, and one whose gradients are not finite (the
    # non-finite policy refuses it) drops what was staged.
    ctx = _ctx_with_scaler(1.0)
    ctx.scaler = None
    owner = _Owner()
    ctx.zero_grad("D")
    ctx.backward(ctx.D(ctx.reals[0]).square().mean(), "D")
    ctx.stage("D", owner, "mean", owner.mean + 1)
    assert ctx.opt_step("D") and float(owner.mean) == 1.0
    ctx.zero_grad("D")
    ctx.backward(ctx.D(ctx.reals[0]).square().mean() * float("nan"), "D")
    ctx.stage("D", owner, "mean", owner.mean + 1)
    assert not ctx.opt_step("D") and float(owner.mean) == 1.0 and ctx.nonfinite == "D"
