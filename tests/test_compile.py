"""torch.compile: compiled and eager training steps give the same gradients for every update
strategy. The checks trace with the "aot_eager" backend, which runs the same Dynamo
capture and AOTAutograd forward/backward graphs as inductor but skips C++ code generation (minutes
per graph on a 2-core CPU); the growth/recompile behaviour is the same for both backends."""

from __future__ import annotations

import pytest
import torch

from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe

STRATEGIES = build_plugins().registry.names("update")


def named(run):
    return [(f"G.{n}", p) for n, p in run.G.named_parameters()] + [(f"D.{n}", p) for n, p in run.D.named_parameters()]


def one_step(path, strategy, compiled):
    overrides = [f"update.name={strategy}", "optim.name=sgd", "optim.lr=1.0", "run.tick_kimg=10",
                 f"run.compile={'true' if compiled else 'false'}", "run.compile_backend=aot_eager",
                 f"run.out_dir='{path.parent / ('compiled' if compiled else 'eager')}'"]
    recipe, plugins = load_recipe(path, overrides)
    run = build_run(recipe, plugins)
    before = {n: p.detach().clone() for n, p in named(run)}
    train(run, max_steps=1)
    after = dict(named(run))
    # with SGD at lr 1 the parameter change is minus the gradient
    return {n: (before[n] - after[n].detach()) for n in before}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compiled_and_eager_gradients_agree(tiny_recipe, strategy):
    torch._dynamo.reset()
    eager = one_step(tiny_recipe, strategy, compiled=False)
    compiled = one_step(tiny_recipe, strategy, compiled=True)
    moved = [n for n, g in eager.items() if g.abs().max() > 0]
    # the step really updated both networks (G: dense, conv4; D: fromRGB, conv4, ...)
    assert {"G.dense.parametrizations.weight.original", "G.conv4.parametrizations.weight.original",
            "D.from_rgb.4.parametrizations.weight.original", "D.conv4.parametrizations.weight.original",
            "D.dense.parametrizations.weight.original"} <= set(moved), moved
    for name in eager:
        torch.testing.assert_close(compiled[name], eager[name], rtol=1e-4, atol=1e-4, msg=name)


COMPILES = []


def _counting_backend(gm, example_inputs):
    COMPILES.append(len(gm.graph.nodes))
    return gm.forward  # run the captured graph eagerly


torch._dynamo.register_backend(name="gankit_test_counting")(_counting_backend)


def test_alpha_moving_through_a_fade_never_recompiles(tiny_recipe):
    """The resolution is a Python attribute (one set of graphs per phase); alpha is a tensor buffer,
    so the fade, which changes it every step, and the fade -> stabilise switch reuse the graphs."""
    from gan_kit import hookimpl

    seen = []

    class Watch:
        @hookimpl
        def step_finished(self, run, stats):
            seen.append((run.phase.index, run.phase.alpha, len(COMPILES)))

    torch._dynamo.reset()
    COMPILES.clear()
    recipe, plugins = load_recipe(tiny_recipe, ["run.compile=true", "run.compile_backend=gankit_test_counting",
                                                "run.total_kimg=0.12"], extra_plugins=[Watch()])
    train(build_run(recipe, plugins))
    fade = [s for s in seen if s[0] == 1]
    assert len({a for _, a, _ in fade}) == 6 and fade[-1][1] == 1.0  # 0, 0.2, ..., 0.8 in the fade, then 1
    # every graph of the 8px phase is compiled on its first step; none after, whatever alpha does
    assert fade[1][2] == fade[-1][2]
    assert fade[0][2] > seen[0][2]  # growing did compile the new resolution's graphs
    # a bounded number of graphs per phase: each network trained and frozen (no graph breaks)
    from gan_kit.training.networks import GRAPHS_PER_PHASE

    first = [s for s in seen if s[0] == 0]
    assert first[-1][2] <= 2 * GRAPHS_PER_PHASE and fade[-1][2] - first[-1][2] <= 2 * GRAPHS_PER_PHASE, seen


def test_the_recompile_limit_fits_every_phase_of_the_plan(tiny_recipe):
    """A progressive run 4 -> 64 px has 5 phases, two graphs per network each: more than dynamo's
    default limit of 8 entries, past which the later phases would run eager. The run raises the
    limit from its phase plan."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    before = getattr(config, name)
    try:
        setattr(config, name, 8)
        recipe, plugins = load_recipe(tiny_recipe, ["run.compile=true", "run.compile_backend=aot_eager",
                                                    "data.resolution=64", "run.total_kimg=10"])
        run = build_run(recipe, plugins)
        phases = len({p.index for p in run.phases()})
        assert phases == 5
        assert getattr(config, name) >= 2 * phases
    finally:
        setattr(config, name, before)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compiled_run_through_a_growth_matches_eager(tiny_recipe, tmp_path, strategy):
    """Ten steps through the 4 -> 8 px growth (recompile at the new phase, both paths while
    fading): compiled and eager end at the same weights. shared-fake backpropagates its G->D
    graph twice (retain_graph), which AOTAutograd's donated buffers would refuse."""
    from gan_kit.runs import checkpoint as ckpt

    def final(compiled: bool) -> dict:
        torch._dynamo.reset()
        out = tmp_path / ("compiled" if compiled else "eager")
        recipe, plugins = load_recipe(tiny_recipe, [
            f"update.name={strategy}", "optim.name=sgd", "optim.lr=0.01", "run.total_kimg=0.08",
            f"run.compile={'true' if compiled else 'false'}", "run.compile_backend=aot_eager"])
        train(build_run(recipe, plugins, out_dir=out))
        return ckpt.load(out / "checkpoints" / "latest.pt")

    eager, compiled = final(False), final(True)
    assert eager["cur_nimg"] == compiled["cur_nimg"] == 80 and compiled["phase"]["resolution"] == 8
    for net in ("G", "D"):
        for k in eager[net]:
            torch.testing.assert_close(compiled[net][k], eager[net][k], rtol=1e-4, atol=1e-5, msg=f"{net}.{k}")
