"""Augmentation inside training: every image D sees - in every strategy and every
penalty - went through the augmentation; ADA's p rises on a D that overfits and falls on one that
does not; p and the augmentation RNG survive an exact resume."""

from __future__ import annotations

import pytest
import torch

from gan_kit import Augment, hookimpl
from gan_kit.runs.session import train
from gan_kit.testing import make_run

STRATEGIES = ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"]


class Recording(Augment):
    """Adds 0 (a new tensor) and remembers the storage of every tensor it hands to D."""

    outputs: set = set()

    def __call__(self, images):
        out = images + 0.0
        Recording.outputs.add(out.data_ptr())
        return out


class Plugin:
    @hookimpl
    def register_augmentations(self, register):
        register("recording", Recording)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_image_d_sees_was_augmented_in_every_strategy_and_penalty(tmp_path, strategy):
    run = make_run(tmp_path, plugins=[Plugin()], overrides=[
        f"update.name={strategy}", "update.d_steps=2", "augment.name=recording",
        "penalty=[{name='gradient-penalty', weight=10.0}, {name='drift', weight=0.001}, "
        "{name='r1', weight=1.0, interval=2}]"])
    seen = []
    run.D.register_forward_pre_hook(lambda module, args: seen.append(args[0].data_ptr()))
    Recording.outputs = set()
    train(run, max_steps=4)
    assert len(seen) > 20  # D's forwards: the D objectives, G steps, GP and lazy R1
    assert all(ptr in Recording.outputs for ptr in seen)


def test_ada_p_rises_on_a_d_that_overfits_and_falls_on_one_that_does_not(tmp_path):
    # 8 real images and a G that barely moves: D soon calls every real real (r_t -> 1 > 0.6)
    overfit = make_run(tmp_path / "a", overrides=[
        "data.max_images=8", "loss.name=bce", "penalty=[]", "optim.d_lr=0.01", "optim.g_lr=0.000001",
        "augment={name='ada', interval=1, kimg=0.5}", "run.total_kimg=0.4", "run.tick_kimg=0.4"])
    train(overfit)
    # p moves at most 0.4 kimg / 0.5 kimg = 0.8 in this run; it climbs most of the way
    assert float(overfit.augment.state_dict()["p"]) > 0.3
    # a D that hardly learns (lr 1e-6) is no better than chance on reals: p falls from 0.5 to 0
    weak = make_run(tmp_path / "b", overrides=[
        "augment={name='ada', interval=1, kimg=0.5, p_init=0.5}", "optim.d_lr=0.000001",
        "run.total_kimg=0.4", "run.tick_kimg=0.4"])
    stats = train(weak)
    assert float(weak.augment.state_dict()["p"]) == 0.0
    assert 0 < stats["Augment/p"] < 0.5  # the tick's mean: p logged in metrics.jsonl


@pytest.mark.parametrize("augment", ["{name='ada', interval=2, kimg=0.2, p_init=0.3}",  # the full 'bgc' pipeline
                                     "{name='ada', pipeline='gankit-subset', interval=2, kimg=0.2, p_init=0.3}",
                                     "{name='diffaugment'}"])
def test_p_and_the_augmentation_draws_survive_an_exact_resume(tmp_path, augment):
    over = [f"augment={augment}", "run.total_kimg=0.048"]
    straight = make_run(tmp_path / "a", overrides=over)
    train(straight)
    first = make_run(tmp_path / "b", overrides=[f"augment={augment}", "run.total_kimg=0.024"])
    train(first)
    resumed = make_run(tmp_path / "b", overrides=over)
    train(resumed, resume=True)
    for name in ("G", "D", "G_ema"):
        a, b = getattr(straight, name).state_dict(), getattr(resumed, name).state_dict()
        assert [k for k in a if not torch.equal(a[k], b[k])] == [], name
    sa, sb = straight.augment.state_dict(), resumed.augment.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])) for k in sa)


class CountingAugment(Augment):
    """Identity; records what the engine tells ``end_step``."""

    calls: list = []

    def __call__(self, images):
        return images

    def end_step(self, step, nimg):
        CountingAugment.calls.append((step, nimg))
        return {}


class CountingPlugin:
    @hookimpl
    def register_augmentations(self, register):
        register("counting", CountingAugment)


@pytest.mark.parametrize("d_steps", [1, 2])
def test_end_step_is_told_the_real_images_each_iteration_showed(tmp_path, d_steps):
    """The engine hands ``end_step`` the real images an iteration shows D, every critic step
    counted (batch x d_steps), so ADA's p moves per real image as docs/augmentation.md says."""
    CountingAugment.calls = []
    run = make_run(tmp_path, plugins=[CountingPlugin()], overrides=[
        "augment.name=counting", f"update.d_steps={d_steps}", "growth.batch_size=16", "run.total_kimg=0.128"])
    train(run)
    assert CountingAugment.calls == [(t, 16 * d_steps) for t in range(1, 8 // d_steps + 1)]


@pytest.mark.parametrize("d_steps", [1, 2])
def test_ada_p_moves_per_real_image_shown_whatever_the_critic_steps(d_steps):
    """p can go 0 -> 1 in `kimg` thousand real images shown: with r_t above the target on every
    adjustment, 512 images at kimg = 1 give p = 0.512 with one and with two critic steps per
    iteration (the ada_speed_d_steps case: 0.256 with two before)."""
    from gan_kit.builtin.augment.ada import AdaptiveAugment

    ada = AdaptiveAugment(AdaptiveAugment.Options(target=0.0, kimg=1.0, interval=4))
    for step in range(1, 32 // d_steps + 1):
        for _ in range(d_steps):
            ada.feedback(torch.ones(16))  # D calls every real real: r_t = 1 > target
        ada.end_step(step, 16 * d_steps)
    assert float(ada.p) == pytest.approx(0.512, abs=1e-6)
