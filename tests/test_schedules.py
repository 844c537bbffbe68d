"""Schedules of numeric options over training: the built-in shapes against their formulas, the
recipe forms (next to the option, array items, --set) and their one-line errors, the values
where they act (optimizer param groups, penalty weights, G_ema, a component's own option) before
every iteration with no tensor work, the tick line / metrics.jsonl, a plugin's own shape through
register_schedules, and exact resume under one and two processes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

from gan_kit import Penalty, Schedule, hookimpl, option
from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import RecipeError
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe, recipe_to_toml

LR = 'optim.lr={schedule="cosine", start=0.002, end=0.0002, warmup_kimg=0.02, kimg=0.08}'
WEIGHT = 'penalty.0.weight={schedule="linear", start=10.0, end=1.0, kimg=0.08}'


def shape(name: str, **options):
    comp = build_plugins(load_entry_points=False).registry.get("schedule", name)
    return comp.factory(comp.Options(**options), None)


def test_builtin_shapes_follow_their_formulas():
    total = 10_000
    cos = shape("cosine", start=1.0, end=0.1, warmup_kimg=2.0, warmup_start=0.5)
    assert cos.value(0, total) == 0.5 and cos.value(1000, total) == pytest.approx(0.75)  # the warm-up
    assert cos.value(2000, total) == 1.0
    # kimg unset = the run's length: half-way through the decay (2..10 kimg) the value is the mean
    assert cos.value(6000, total) == pytest.approx(0.55)
    assert cos.value(4000, total) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25)))
    assert cos.value(10_000, total) == pytest.approx(0.1) and cos.value(50_000, total) == pytest.approx(0.1)
    lin = shape("linear", start=0.9, end=0.99, kimg=5.0)
    assert lin.value(0, total) == 0.9 and lin.value(2500, total) == pytest.approx(0.945)
    assert lin.value(5000, total) == pytest.approx(0.99) and lin.value(9000, total) == pytest.approx(0.99)
    step = shape("step", start=1.0, milestones_kimg=[2.0, 4.0], factor=0.5)
    assert [step.value(n, total) for n in (0, 1999, 2000, 3999, 4000, 9000)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    const = shape("constant", value=3.0, warmup_kimg=1.0)
    assert [const.value(n, total) for n in (0, 250, 1000, 7000)] == [0.0, 0.75, 3.0, 3.0]
    pw = shape("piecewise", kimg=[1.0, 3.0], values=[0.0, 1.0])
    assert [pw.value(n, total) for n in (0, 1000, 2000, 3000, 5000)] == [0.0, 0.0, 0.5, 1.0, 1.0]


def test_a_schedule_is_written_next_to_its_option_and_saved_as_written(tiny_recipe):
    recipe, _ = load_recipe(tiny_recipe, [LR, WEIGHT, 'optim.betas=[0.0, {schedule="linear", start=0.9, end=0.99}]',
                                          'ema.half_life_kimg={schedule="constant", value=0.5, warmup_kimg=0.04}'])
    keys = {s.key: s.name for s in recipe.schedules}
    assert keys == {"optim.lr": "cosine", "penalty[0].weight": "linear", "optim.betas[1]": "linear",
                    "ema.half_life_kimg": "constant"}
    # the option holds the value at 0 images (lr's warm-up starts at 0: allowed for a schedule)
    assert recipe.optim.lr == 0.0 and recipe.optim.betas == (0.0, 0.9) and recipe.penalties[0].slot.weight == 10.0
    text = recipe_to_toml(recipe)
    assert 'lr = { schedule = "cosine", start = 0.002, end = 0.0002, kimg = 0.08, warmup_kimg = 0.02' in text
    assert 'betas = [0.0, { schedule = "linear", start = 0.9, end = 0.99,' in text
    again, _ = load_recipe(Path("[saved]"), text=text)
    assert again.schedules == recipe.schedules and again.optim == recipe.optim


@pytest.mark.parametrize("override, message", [
    ('architecture.latent_dim={schedule="linear", start=8, end=16}',
     "architecture.latent_dim: a schedule is not allowed here: latent_dim is fixed for the run, not a schedulable "
     "option of architecture 'pggan' (write a constant, e.g. latent_dim = 512;"),
    ('run.total_kimg={schedule="linear", start=1, end=2}', "run.total_kimg: a schedule is not allowed here: the [run] "
                                                           "table is fixed for the run"),
    ('data.resolution={schedule="linear", start=8, end=16}', "data.resolution: a schedule is not allowed here: the "
                                                             "data set is built once"),
    ('init.gain={schedule="linear", start=1, end=2}', "init.gain: a schedule is not allowed here: the initializer runs "
                                                      "once, when the networks are built"),
    ('optim.lr={schedule="cosin", start=0.1, end=0.01}', "optim.lr.schedule: unknown schedule 'cosin' (did you mean "
                                                         "'cosine'?); available: constant, cosine, linear, piecewise, step"),
    ('optim.lr={schedule="linear", start=0.1}', "optim.lr.end: missing: schedule 'linear' needs it"),
    ('optim.lr={shedule="cosine", start=0.1, end=0.01}', "optim.lr: 'shedule' is no key of a schedule table (did you "
                                                         "mean 'schedule'?); a schedule table names its shape"),
    ('penalty.0.weight={start=1.0, end=0.1}', "penalty[0].weight: a table without a 'schedule' key; a schedule table "
                                              "names its shape, e.g. {schedule = \"cosine\", start = 0.5, end = 0.0}"),
    ('optim.lr={schedule="linear", start=0.1, end=0.01, stat=1}', "optim.lr.stat: unknown option (did you mean 'start'?)"),
    ('optim.betas=[0.0, {schedule="linear", start=0.9, end=1.5}]',
     "optim.betas[1]: schedule 'linear' gives 1.0"),  # ... at 0.034 kimg of 0.2, which is not in [0, 1)
    ('penalty.0.weight={schedule="linear", start=1.0, end=-1.0}',
     "penalty[0].weight: schedule 'linear' gives -0.01 at 0.101 kimg of 0.2, which is not >= 0 (use 0 or a "
     "positive number; change the schedule's values)"),
    ('optim.lr={schedule="linear", start=0.1, end=0.01, kimg=1, warmup_kimg=2}',
     "optim.lr.warmup_kimg: 2 is not below kimg = 1: the warm-up must end before the decay does"),
])
def test_recipe_errors_for_schedules_are_one_line_naming_the_key(tiny_recipe, override, message):
    with pytest.raises(RecipeError) as e:
        load_recipe(tiny_recipe, [override])
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_values_are_set_before_every_iteration_where_they_act(tiny_recipe, tmp_path):
    ema = 'ema.half_life_kimg={schedule="linear", start=0.1, end=1.0, kimg=0.08}'
    recipe, plugins = load_recipe(tiny_recipe, [LR, WEIGHT, ema, "optim.d_lr=0.004", "run.total_kimg=0.048",
                                                "run.tick_kimg=0.016"])
    run = build_run(recipe, plugins)
    seen = []

    class Watch:
        @hookimpl
        def step_finished(self, run, stats):
            seen.append((run.opt_G.param_groups[0]["lr"], run.opt_D.param_groups[0]["lr"], run.penalties[0].weight,
                         run.ema_options.half_life_kimg))

    run.plugins.pm.register(Watch())
    train(run)
    cos, lin = shape("cosine", start=0.002, end=0.0002, warmup_kimg=0.02, kimg=0.08), \
        shape("linear", start=10.0, end=1.0, kimg=0.08)
    for i, (g_lr, d_lr, weight, half_life) in enumerate(seen):
        nimg = 8 * i  # the images shown before iteration i (batch 8)
        scale = run.growth.phase_at(nimg).lr_scale
        assert g_lr == cos.value(nimg, 48) * scale and d_lr == 0.004 * scale  # d_lr is a constant
        assert weight == lin.value(nimg, 48)
        assert half_life == pytest.approx(0.1 + 0.9 * nimg / 80)
    rows = [json.loads(line) for line in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["Schedule/optim.lr"] for r in rows] == [cos.value(n, 48) for n in (8, 24, 40)]
    assert rows[-1]["Schedule/penalty.0.weight"] == lin.value(40, 48)  # keyed as --set spells it
    assert "Schedule/optim.d_lr" not in rows[-1]
    from gan_kit.builtin.reporting import tick_keys  # the tick line shows each scheduled value

    assert ("optim.lr", "Schedule/optim.lr") in tick_keys(rows[-1])


def test_applying_schedules_runs_no_tensor_operation(tiny_recipe):
    """The per-iteration work is host float arithmetic: no tensor op, so no device sync on a GPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    recipe, plugins = load_recipe(tiny_recipe, [LR, WEIGHT, 'optim.betas=[0.0, {schedule="linear", start=0.9, '
                                                             'end=0.99}]'])
    run = build_run(recipe, plugins)
    with Count() as count:
        for nimg in range(0, 200, 8):
            run.apply_schedules(nimg)
    assert count.ops == []
    assert run.opt_D.param_groups[0]["betas"] == (0.0, pytest.approx(0.9 + 0.09 * 192 / 200))


class Scaled(Penalty):
    """A test penalty: ``scale * mean(D(real)^2)``, ``scale`` a schedulable option of its own."""

    @attrs.frozen
    class Options:
        scale: float = option(1.0, help="Multiplier.", min=0, schedulable=True)

    def __call__(self, inputs, ctx):
        return self.options.scale * inputs.real_logits.square().mean()


class Square(Schedule):
    """A plugin's own shape: ``(nimg / total) ** 2 * top``."""

    @attrs.frozen
    class Options:
        top: float = option(1.0, help="Value at the end of the run.")

    def value(self, nimg, total_nimg):
        return self.options.top * (nimg / total_nimg) ** 2


class ShapePlugin:
    @hookimpl
    def register_penalties(self, register):
        register("scaled", Scaled)

    @hookimpl
    def register_schedules(self, register):
        register("square", Square)


def test_a_plugin_schedules_its_own_option_with_its_own_shape(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ['penalty=[{name="scaled", scale={schedule="square", top=4.0}}]',
                                                "run.total_kimg=0.032"], extra_plugins=[ShapePlugin()])
    run = build_run(recipe, plugins)
    scales = []
    run.plugins.pm.register(type("W", (), {"step_finished": hookimpl(
        lambda self, run, stats: scales.append(run.penalties[0].penalty.options.scale))})())
    train(run)
    assert scales == [4.0 * (n / 32) ** 2 for n in (0, 8, 16, 24)]
    assert ("schedule", "square") in run.registry and run.registry.get("schedule", "square").plugin == "ShapePlugin-0"


def test_resume_is_bit_identical_with_scheduled_lr_and_penalty_weight(tiny_recipe, tmp_path):
    """A run split in two (kimg set explicitly: the first half has a shorter run.total_kimg) and a
    run stopped after 4 iterations with kimg left at the run's length both end bit-identical to
    the uninterrupted run."""
    from test_checkpoint import assert_same_state, run_for

    sched = [LR, WEIGHT]
    straight = run_for(tiny_recipe, tmp_path / "straight", 0.08, overrides=sched)
    run_for(tiny_recipe, tmp_path / "split", 0.032, overrides=sched)
    resumed = run_for(tiny_recipe, tmp_path / "split", 0.08, resume=True, overrides=sched)
    assert_same_state(straight, resumed)

    default_len = ['optim.lr={schedule="cosine", start=0.002, end=0.0002}',
                   'penalty.0.weight={schedule="linear", start=10.0, end=1.0}']
    straight = run_for(tiny_recipe, tmp_path / "straight2", 0.08, overrides=default_len)
    recipe, plugins = load_recipe(tiny_recipe, [f"run.out_dir='{tmp_path / 'stopped'}'", "run.total_kimg=0.08",
                                                *default_len])
    first = build_run(recipe, plugins)
    train(first, max_steps=4)
    first.save_checkpoint()
    resumed = run_for(tiny_recipe, tmp_path / "stopped", 0.08, resume=True, overrides=default_len)
    assert_same_state(straight, resumed)
    assert resumed.schedule_values == straight.schedule_values


def test_a_two_process_run_resumes_bit_identical_with_schedules(tiny_recipe, tmp_path):
    """Under torchrun (2 processes, gloo) the split-and-resumed run ends bit-identical to the
    uninterrupted two-process run, with schedules on the learning rate and a penalty weight."""
    base = [LR, WEIGHT]
    worker = Path(__file__).with_name("ddp_worker.py")
    configs = [f"straight={';'.join(base + ['run.total_kimg=0.08'])}",
               f"split={';'.join(base + ['run.total_kimg=0.032'])}",
               f"split@resume={';'.join(base + ['run.total_kimg=0.08'])}"]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(worker), str(tiny_recipe), str(tmp_path / "two"), *configs],
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    a = ckpt.load(tmp_path / "two" / "straight" / "checkpoints" / "latest.pt")
    b = ckpt.load(tmp_path / "two" / "split" / "checkpoints" / "latest.pt")
    assert a["step"] == b["step"] == 10
    for net in ("G", "D", "G_ema"):
        assert [k for k in a[net] if not torch.equal(a[net][k], b[net][k])] == [], net
    assert a["opt_D"]["param_groups"] == b["opt_D"]["param_groups"]
    assert b["opt_G"]["param_groups"][0]["lr"] == pytest.approx(
        shape("cosine", start=0.002, end=0.0002, warmup_kimg=0.02, kimg=0.08).value(72, 80)
        * b["phase"]["lr_scale"])


def test_a_resumed_run_may_change_a_schedulable_option_and_nothing_fixed(tiny_recipe, tmp_path):
    """What may change mid-run may change on resume: a component's schedulable option (here from
    a schedule to a constant) and a penalty weight's schedule; an option fixed for the run is
    still refused in one line."""
    from gan_kit.base.errors import CheckpointError

    base = ['penalty=[{name="scaled", scale={schedule="square", top=4.0}}]', f"run.out_dir='{tmp_path / 'run'}'"]

    def run(overrides, resume):
        recipe, plugins = load_recipe(tiny_recipe, [*base, *overrides], extra_plugins=[ShapePlugin()])
        r = build_run(recipe, plugins)
        train(r, resume=resume)
        return r

    run(["run.total_kimg=0.016"], False)
    resumed = run(["run.total_kimg=0.032", "penalty.0.scale=2.0",
                   'penalty.0.weight={schedule="linear", start=1.0, end=0.5}'], True)
    assert resumed.penalties[0].penalty.options.scale == 2.0 and resumed.schedule_values["penalty[0].weight"] < 1
    with pytest.raises(CheckpointError, match=r"architecture.latent_dim = 8, the recipe now says 16; this cannot "
                                              r"change in a resumed run"):
        run(["run.total_kimg=0.048", "architecture.latent_dim=16"], True)
