"""The training loop: growth with kept optimizer state, per-phase batch/lr, EMA, non-finite
losses, and a short real run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gan_kit import Loss, hookimpl
from gan_kit.training.ema import update_ema
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import TrainingError
from gan_kit.recipe import load_recipe


class Recorder:
    """A test plugin recording what the lifecycle hooks see."""

    def __init__(self):
        self.steps = []
        self.phases = []
        self.opt_state_before_growth = None
        self.growth_checks = []

    @hookimpl
    def step_finished(self, run, stats):
        self.steps.append({"nimg": run.cur_nimg, "batch": run.phase.batch_size, "res": run.phase.resolution,
                           "alpha": run.phase.alpha, "lr_G": run.opt_G.param_groups[0]["lr"],
                           "lr_D": run.opt_D.param_groups[0]["lr"], "stats": dict(stats)})
        nxt = run.growth.phase_at(run.cur_nimg)
        if nxt.index != run.phase.index:  # the next step grows the networks: snapshot Adam's state
            self.opt_state_before_growth = {
                name: {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in opt.state}
                for name, opt in (("G", run.opt_G), ("D", run.opt_D))}
            self.opt_objects = (run.opt_G, run.opt_D)

    @hookimpl
    def phase_started(self, run, phase):
        self.phases.append((run.cur_nimg, phase.index, phase.resolution))
        if self.opt_state_before_growth is not None and run.previous_phase is not None:
            assert (run.opt_G, run.opt_D) == self.opt_objects  # never rebuilt
            for name, opt in (("G", run.opt_G), ("D", run.opt_D)):
                saved = self.opt_state_before_growth[name]
                for p in opt.state:
                    for k, v in opt.state[p].items():
                        self.growth_checks.append(torch.equal(v, saved[id(p)][k]))


def build(path, overrides=(), extra=()):
    recipe, plugins = load_recipe(path, list(overrides), extra_plugins=list(extra))
    return build_run(recipe, plugins)


def test_short_run_grows_with_finite_losses_and_writes_run_dir(tiny_recipe):
    rec = Recorder()
    run = build(tiny_recipe, extra=[rec])
    final = train(run)
    assert run.cur_nimg >= 200
    assert [p[2] for p in rec.phases] == [4, 8]  # passed through one growth
    assert all(math.isfinite(v) for s in rec.steps for v in s["stats"].values())
    assert {"Loss/D", "Loss/G", "Loss/D/gradient-penalty"} <= set(rec.steps[-1]["stats"])
    out = run.out_dir
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) >= 2 and lines[-1]["Progress/final"] is True
    assert lines[-1]["Progress/resolution"] == 8 and final["Progress/kimg"] == pytest.approx(0.2)
    assert (out / "recipe.toml").read_text().startswith("# resolved by gankit; versions: torch ")
    assert (out / "samples" / "final.png").is_file() and (out / "samples" / "phase-0-4px.png").is_file()
    assert (out / "checkpoints" / "latest.pt").is_file() and (out / "checkpoints" / "phase-0-4px.pt").is_file()


def test_adam_state_survives_growth_and_inactive_blocks_get_no_updates(tiny_recipe):
    rec = Recorder()
    # final 16px, but stop while still at 8px: the 16px blocks must never move
    run = build(tiny_recipe, ["data.resolution=16", "run.total_kimg=0.12"], extra=[rec])
    def named():
        return [(f"G.{n}", p) for n, p in run.G.named_parameters()] + \
               [(f"D.{n}", p) for n, p in run.D.named_parameters()]

    inactive = {n: p.detach().clone() for n, p in named() if ".16." in n}
    assert len(inactive) == 12  # G: 2 convs + toRGB, D: fromRGB + 2 convs, weight and bias each
    ids_before = [id(p) for p in run.G.parameters()]
    train(run)
    assert rec.growth_checks and all(rec.growth_checks)
    assert [id(p) for p in run.G.parameters()] == ids_before
    params = dict(named())
    for name, value in inactive.items():
        assert torch.equal(params[name], value), name
        assert run.opt_G.state.get(params[name]) in (None, {}) and run.opt_D.state.get(params[name]) in (None, {})


def test_per_resolution_batch_size_and_lr_take_effect_at_the_right_image_count(tiny_recipe):
    rec = Recorder()
    run = build(tiny_recipe, ["growth.batch_size={4=8, 8=4}", "growth.lr_scale={8=0.5}",
                              "optim.g_lr=0.002", "run.total_kimg=0.1"], extra=[rec])
    train(run)
    # 4px stabilises for 40 images with batch 8 (5 steps), then 8px fades in with batch 4.
    before = [s for s in rec.steps if s["nimg"] <= 40]
    after = [s for s in rec.steps if s["nimg"] > 40]
    assert [s["batch"] for s in before] == [8] * 5 and all(s["batch"] == 4 for s in after)
    assert all(s["lr_G"] == 0.002 and s["lr_D"] == 0.001 for s in before)
    assert all(s["lr_G"] == 0.001 and s["lr_D"] == 0.0005 for s in after)
    assert rec.phases[1] == (40, 1, 8)
    alphas = [s["alpha"] for s in after]
    assert alphas == sorted(alphas) and alphas[0] == 0.0
    assert alphas[1] == pytest.approx(4 / 40)


def test_ema_decay_zero_equals_G_and_decay_one_never_changes(tiny_recipe):
    run = build(tiny_recipe)
    with torch.no_grad():
        for p in run.G.parameters():
            p.add_(torch.randn_like(p))
        run.G.alpha.fill_(0.25)
    frozen = {k: v.clone() for k, v in run.G_ema.state_dict().items()}
    update_ema(run.G_ema, run.G, 1.0)
    for k, v in run.G_ema.state_dict().items():
        if k != "alpha":
            assert torch.equal(v, frozen[k])
    update_ema(run.G_ema, run.G, 0.0)
    for (k, v), (_, w) in zip(run.G_ema.state_dict().items(), run.G.state_dict().items()):
        assert torch.equal(v, w), k


class NaNLoss(Loss):
    """hinge, but non-finite from the 4th D loss on"""

    calls = 0

    def d_loss(self, real_logits, fake_logits):
        NaNLoss.calls += 1
        loss = torch.relu(1 - real_logits).mean() + torch.relu(1 + fake_logits).mean()
        return loss * float("nan") if NaNLoss.calls >= 4 else loss

    def g_loss(self, fake_logits, real_logits=None):
        return -fake_logits.mean()


class NaNPlugin:
    @hookimpl
    def register_losses(self, register):
        register("nan-after-3", NaNLoss)


class CheckpointBytes:
    saved: dict = {}

    @hookimpl
    def checkpoint_saved(self, run, path):
        CheckpointBytes.saved[path.name] = path.read_bytes()


def test_nonfinite_stop_names_step_and_leaves_checkpoint(tiny_recipe):
    NaNLoss.calls = 0
    CheckpointBytes.saved.clear()
    # a checkpoint after the first tick (2 steps), NaN from the 4th step on
    run = build(tiny_recipe, ["loss.name=nan-after-3", "run.snapshot_ticks=1", "run.tick_kimg=0.016"],
                extra=[NaNPlugin(), CheckpointBytes()])
    with pytest.raises(TrainingError, match=r"step 4 \(kimg 0\.032, 4px\): Loss/D is nan; stopped before any update with it \(last good "
                                            r"checkpoint: .*latest\.pt\)"):
        train(run)
    assert (run.out_dir / "checkpoints" / "latest.pt").read_bytes() == CheckpointBytes.saved["latest.pt"]


def test_nonfinite_skip_counts_keeps_weights_finite_and_is_bounded(tiny_recipe):
    NaNLoss.calls = 0
    run = build(tiny_recipe, ["loss.name=nan-after-3", "run.on_nonfinite=skip", "run.max_skipped=5"],
                extra=[NaNPlugin()])
    with pytest.raises(TrainingError, match="6 steps skipped for non-finite values"):
        train(run)
    assert run.skipped_steps == 6
    for p in list(run.D.parameters()) + list(run.G_ema.parameters()):
        assert torch.isfinite(p).all()


def test_ema_half_life_with_rampup_follows_stylegan2():
    from gan_kit.training.ema import ema_beta

    assert ema_beta(0.999, None, None, 64, 10**6) == 0.999
    assert ema_beta(0.999, 10.0, 0.05, 64, 10**6) == 0.999  # a fixed decay, when set, wins
    # half-life 10 kimg: after 10k images (batch 64 per step) the old average has half its weight
    beta = ema_beta(None, 10.0, None, 64, 10**6)
    assert beta ** (10_000 / 64) == pytest.approx(0.5)
    # ramp-up: early on the half-life is cur_nimg * rampup, so G_ema tracks G closely
    early = ema_beta(None, 10.0, 0.05, 64, 20_000)  # half-life min(10000, 1000) = 1000 images
    assert early == pytest.approx(0.5 ** (64 / 1000))
    assert early < beta


def test_group_size_that_does_not_divide_the_batch_is_a_recipe_error(tiny_recipe):
    from gan_kit.base.errors import RecipeError

    with pytest.raises(RecipeError) as e:
        load_recipe(tiny_recipe, ["growth.batch_size=6"])
    assert "architecture.mbstd_group_size" in str(e.value)
    assert "group size 4 does not divide the batch size 6" in str(e.value)


def test_penalties_never_touch_the_fade_state(tiny_recipe):
    from gan_kit.base.phase import Phase, fade_real

    run = build(tiny_recipe)
    phase = Phase(index=1, resolution=8, alpha=0.37, batch_size=8)
    run.set_phase(phase)
    real = fade_real(run.dataset.images[:8], 8, 0.37)
    ctx = run.step_context(phase, [real])
    with torch.no_grad():
        fake = run.G(run.latent(8))
    total, stats = ctx.d_objective(real, fake)
    total.backward()
    assert "Loss/D/gradient-penalty" in stats
    for net in (run.G, run.D, run.G_ema):
        assert net.resolution == 8 and net.alpha.item() == pytest.approx(0.37)
        assert net.alpha.grad is None and not net.alpha.requires_grad


def test_ema_rampup_reads_the_image_count_before_the_iteration(tmp_path, monkeypatch):
    """StyleGAN2-ADA's training_loop computes the ramped-up half-life from cur_nimg before the
    iteration: beta = 0 at the first step (G_ema becomes G exactly), and at iteration t + 1
    (batch B) beta = 0.5 ** (B / (t * B * rampup))."""
    import gan_kit.runs.engine as engine_module
    from gan_kit.testing import make_run, train_steps

    run = make_run(tmp_path, overrides=["ema={half_life_kimg=10, rampup=0.05}", "growth.batch_size=8"])
    betas, equal_after_first = [], []
    real_update = engine_module.update_ema

    def recording(G_ema, G, beta, skip=None):  # skip: the device's skipped-iteration flag
        betas.append(beta)
        real_update(G_ema, G, beta, skip=skip)
        if len(betas) == 1:
            equal_after_first.append(all(torch.equal(a, b) for a, b in zip(G.parameters(), G_ema.parameters())))

    monkeypatch.setattr(engine_module, "update_ema", recording)
    train_steps(run, 3)
    assert equal_after_first == [True]
    assert betas == [0.0, pytest.approx(0.5 ** (8 / (8 * 0.05))), pytest.approx(0.5 ** (8 / (16 * 0.05)))]


@pytest.mark.parametrize("steps,ticks", [(4, [2, 4]), (5, [2, 4, 5])])
def test_max_steps_ending_on_a_tick_writes_no_extra_empty_tick(tiny_recipe, steps, ticks):
    """A tick every 2 iterations (16 images at batch 8): stopping after 4 iterations writes the
    ticks of steps 2 and 4 and no third one without a step; stopping after 5 still writes the
    partial tick of step 5. The returned stats are those of the last tick written."""
    run = build(tiny_recipe, ["run.tick_kimg=0.016"])
    stats = train(run, max_steps=steps)
    rows = [json.loads(line) for line in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["Progress/step"] for r in rows] == ticks
    assert [r["Progress/tick"] for r in rows] == list(range(len(ticks)))
    assert not any(r["Progress/final"] for r in rows)
    assert stats["Progress/step"] == steps and stats["Progress/tick"] == len(ticks) - 1
    assert math.isfinite(stats["Loss/D"])
