"""`gankit bench`: the hand-written reference does exactly the math of d-then-g, and the
command prints every strategy and ends with the ratio line. No timing is asserted."""

from __future__ import annotations

import re

import pytest
import torch
from click.testing import CliRunner

from gan_kit.tools import bench as B


@pytest.mark.parametrize("overrides", [
    [],                                                            # hinge + gradient penalty
    ["loss.name=wgan-gp", "penalty=[]"],                           # wgan + GP 10 + drift 0.001
    ["loss.name=bce", "penalty.0.name=r1", "penalty.0.interval=2", "update.d_steps=2"],  # lazy r1
])
def test_hand_written_loop_is_the_engine_d_then_g_step(tiny_recipe, overrides):
    run, phase, rows, note = B.prepare(tiny_recipe, "d-then-g", overrides=overrides)
    assert note == "" and [r.name for r in rows] == ["d-then-g", B.REFERENCE]
    engine, hand = rows
    # Same initial weights, same real batches and the same RNG stream: same parameters after.
    assert all(torch.equal(a, b) for a, b in zip(engine.nets[0].state_dict().values(), hand.nets[0].state_dict().values()))
    n = phase.batch_size
    reals = [torch.rand(n, run.channels, phase.resolution, phase.resolution) * 2 - 1 for _ in range(run.strategy.d_steps)]
    for row in rows:
        torch.manual_seed(7)
        for _ in range(2):
            row.step(reals)
    for net_e, net_h, start in zip(engine.nets, hand.nets, (run.G, run.D)):
        for (k, a), b in zip(net_e.state_dict().items(), net_h.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-6), k
        assert any(not torch.equal(a, b) for a, b in zip(net_e.parameters(), start.parameters()))  # it trained


def test_bench_command_prints_every_strategy_and_ends_with_the_ratio(tiny_recipe):
    from gan_kit.cli import cli

    result = CliRunner().invoke(cli, ["bench", str(tiny_recipe), "--steps", "2", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    for name in ("d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous", "hand-written"):
        assert name in result.output
    last = result.output.strip().splitlines()[-1]
    assert re.fullmatch(r"engine/hand-written throughput: \d+\.\d\d", last), last


def test_bench_rejects_an_unknown_strategy(tiny_recipe):
    from gan_kit.cli.bench import bench

    result = CliRunner().invoke(bench, [str(tiny_recipe), "--strategies", "d-then-g,shared-fak"])
    assert result.exit_code == 2
    assert "shared-fak" in result.output and "did you mean 'shared-fake'" in result.output
