"""Gradient accumulation (``growth.batch_gpu``): a step whose batch runs in rounds equals the step
that runs it at once, to rounding - for every update strategy, with an eager penalty (the gradient
penalty's random interpolates), a lazy one, minibatch stddev and class labels; the recipe check;
and the warning for a strategy that never calls ``ctx.accumulate``."""

from __future__ import annotations

import pytest
import torch

from gan_kit import GankitError, StepContext, UpdateStrategy, hookimpl
from gan_kit.testing import TINY_RECIPE, make_run, train_steps

LAZY_R1 = TINY_RECIPE.replace('name = "gradient-penalty"\nweight = 10.0', 'name = "r1"\nweight = 1.0\ninterval = 2')


def _weights(run) -> dict[str, torch.Tensor]:
    return {f"{net}.{k}": v.detach().clone() for net, m in (("G", run.G), ("D", run.D))
            for k, v in m.state_dict().items() if v.is_floating_point()}


def _one_step(tmp_path, name: str, overrides: list[str], recipe: str = TINY_RECIPE) -> tuple[dict, dict]:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "r.toml"
    path.write_text(recipe.format(out_dir=(folder / "run").as_posix()), encoding="utf-8")
    steps: list[dict] = []
    run = make_run(folder, recipe=path, overrides=overrides, plugins=[_StepStats(steps)])
    before = _weights(run)
    train_steps(run, 1)
    after = _weights(run)
    assert any(not torch.equal(before[k], after[k]) for k in after), "the step changed no weight"
    return after, steps[0]


class _StepStats:
    def __init__(self, out: list):
        self.out = out

    @hookimpl
    def step_finished(self, run, stats):
        self.out.append(dict(stats))


BASE = ["growth.batch_size=16", "optim.name=sgd", "optim.lr=0.05", "run.tick_kimg=0.016"]


@pytest.mark.parametrize("strategy,extra,recipe", [
    ("d-then-g", [], TINY_RECIPE),
    ("g-then-d", [], TINY_RECIPE),
    ("shared-fake", [], TINY_RECIPE),
    ("simultaneous", ["update.d_steps=2"], TINY_RECIPE),
    ("single-loss", [], TINY_RECIPE),
    ("d-then-g", [], LAZY_R1),
    ("d-then-g", ["architecture.conditional=true"], TINY_RECIPE),
])
def test_a_step_in_rounds_of_batch_gpu_equals_the_whole_batch_step(tmp_path, strategy, extra, recipe):
    """batch 16 in 4 rounds of 4 vs at once: the same weights after the step (the gradient penalty
    draws its interpolation weights per sample; minibatch-stddev groups of 4)."""
    overrides = BASE + [f"update.name={strategy}", *extra]
    whole, whole_stats = _one_step(tmp_path, "whole", overrides, recipe)
    rounds, round_stats = _one_step(tmp_path, "rounds", overrides + ["growth.batch_gpu=4"], recipe)
    for k in whole:
        torch.testing.assert_close(rounds[k], whole[k], rtol=1e-5, atol=1e-6, msg=k)
    losses = [k for k in whole_stats if k.startswith(("Loss/", "Logits/"))]
    assert "Loss/D" in losses and "Loss/G" in losses
    assert {k: round_stats[k] for k in losses} == pytest.approx({k: whole_stats[k] for k in losses},
                                                                 rel=1e-4, abs=1e-5)


def test_rounds_change_the_result_when_they_are_not_accumulated(tmp_path):
    """The comparison above can fail: the batch of 4 alone (no accumulation) trains differently."""
    whole, _ = _one_step(tmp_path, "whole", BASE + ["update.name=d-then-g"])
    small, _ = _one_step(tmp_path, "small", ["growth.batch_size=4", *BASE[1:], "update.name=d-then-g"])
    assert any(not torch.allclose(small[k], whole[k], rtol=1e-3, atol=1e-4) for k in whole)


def test_accumulate_scales_backward_and_forbids_steps_inside(tmp_path):
    run = make_run(tmp_path, overrides=BASE + ["growth.batch_gpu=4"])
    phase = run.growth.phase_at(0)
    ctx = run.step_context(phase, [torch.zeros(16, 1, 4, 4)])
    seen = []

    def body():
        seen.append((ctx.round.index, ctx.round.count, ctx.reals[0].shape[0], ctx.shard()))
        with pytest.raises(GankitError, match="inside ctx.accumulate"):
            ctx.opt_step("D")
        return {"x": torch.tensor(float(ctx.round.index))}

    stats = ctx.accumulate(body)
    assert seen == [(r, 4, 4, (r, 4)) for r in range(4)]
    assert float(stats["x"]) == pytest.approx(1.5)  # the mean over the rounds
    assert ctx.round is None and ctx.reals[0].shape[0] == 16


def test_batch_gpu_must_divide_the_per_process_batch(tmp_path):
    with pytest.raises(GankitError, match=r"growth.batch_gpu: 5 at 4px does not divide the per-process batch 16"):
        make_run(tmp_path, overrides=BASE + ["growth.batch_gpu=5"])
    # a round must hold whole minibatch-stddev groups (6 is not a multiple of 4)
    with pytest.raises(GankitError, match=r"mbstd_group_size 4 does not divide the batch 6"):
        make_run(tmp_path, overrides=["growth.batch_size=12", *BASE[1:], "growth.batch_gpu=6"])


class _WholeBatch(UpdateStrategy):
    """A strategy written without ctx.accumulate."""

    def step(self, ctx: StepContext):
        n = ctx.reals[0].shape[0]
        with torch.no_grad():
            fake = ctx.generate(ctx.latent(n))
        ctx.zero_grad("D")
        total, stats = ctx.d_objective(ctx.reals[0], fake)
        ctx.backward(total, "D")
        ctx.opt_step("D")
        return stats


class _Plugin:
    @hookimpl
    def register_update_strategies(self, register):
        register("whole-batch", _WholeBatch)


def test_a_strategy_without_accumulate_is_told_batch_gpu_has_no_effect(tmp_path, capsys):
    run = make_run(tmp_path, plugins=[_Plugin()], overrides=BASE + ["update.name=whole-batch", "growth.batch_gpu=4"])
    train_steps(run, 2)
    err = capsys.readouterr().err
    assert err.count("does not use ctx.accumulate, so growth.batch_gpu = 4 has no effect") == 1


COUNT_ALLREDUCES = '''
"""Test plugin: count the gradient all-reduces of the DDP networks (one per bucket and backward that syncs)."""
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from gan_kit import hookimpl
from gan_kit.training.networks import find_ddp

calls = [0]


def counted(state, bucket):
    calls[0] += 1
    return allreduce_hook(state, bucket)


@hookimpl
def run_started(run):
    calls[0] = 0
    for net in (run.G_train, run.D_train):
        ddp = find_ddp(net)
        if ddp is not None:
            ddp.register_comm_hook(None, counted)


@hookimpl
def run_finished(run, stats):
    if run.is_main:
        (run.out_dir / "allreduces.txt").write_text(str(calls[0]))
'''


def test_rounds_under_two_processes_equal_the_whole_batch_and_sync_once_per_step(tiny_recipe, tmp_path):
    """Two processes (torchrun, gloo): batch 16 as 8 per process in 2 rounds of 4 ends where the
    unaccumulated two-process run ends, for d-then-g and shared-fake with the gradient penalty, and
    DDP all-reduces as often as without rounds (``no_sync`` in the first round)."""
    import subprocess
    import sys
    from pathlib import Path

    from gan_kit.runs import checkpoint as ckpt

    plugin = tmp_path / "count_allreduces.py"
    plugin.write_text(COUNT_ALLREDUCES)
    base = [f"plugins=['{plugin.as_posix()}']", "run.total_kimg=0.048", "growth.batch_size=16"]
    configs = {f"{u}-{name}": [f"update.name='{u}'", *extra] for u in ("d-then-g", "shared-fake")
               for name, extra in (("whole", []), ("rounds", ["growth.batch_gpu=4"]))}
    worker = Path(__file__).with_name("ddp_worker.py")
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(worker),
         str(tiny_recipe), str(tmp_path / "two"), *(f"{k}={';'.join(base + v)}" for k, v in configs.items())],
        capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    for u in ("d-then-g", "shared-fake"):
        whole, rounds = (tmp_path / "two" / f"{u}-whole", tmp_path / "two" / f"{u}-rounds")
        a, b = ckpt.load(whole / "checkpoints" / "latest.pt"), ckpt.load(rounds / "checkpoints" / "latest.pt")
        assert a["cur_nimg"] == b["cur_nimg"] == 48
        for net in ("G", "D", "G_ema"):
            for k in a[net]:
                torch.testing.assert_close(b[net][k], a[net][k], rtol=0, atol=1e-5, msg=f"{u}: {net}.{k}")
        syncs = int((whole / "allreduces.txt").read_text())
        assert syncs > 0 and int((rounds / "allreduces.txt").read_text()) == syncs, u
