"""The StyleGAN2 recipe under every update strategy, bf16 autocast, torch.compile (aot_eager) and
two processes, with lazy R1 and path length."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

from gan_kit.runs.session import train
from gan_kit.testing import make_run

SG2 = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8}",
       "data.resolution=16", "growth={name='static', batch_size=8}", "loss.name=bce",
       "penalty=[{name='r1', weight=1.0, interval=2}, {name='path-length', weight=2.0, interval=2}]"]


def finite(run) -> bool:
    return all(torch.isfinite(p).all() for net in (run.G, run.D, run.G_ema) for p in net.parameters())


@pytest.mark.parametrize("strategy", ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"])
def test_every_strategy_trains_stylegan2_with_lazy_r1_and_path_length(tmp_path, strategy):
    run = make_run(tmp_path, overrides=[*SG2, f"update.name={strategy}"])
    G0 = [p.detach().clone() for p in run.G.parameters()]
    stats = train(run, max_steps=3)
    assert math.isfinite(stats["Loss/G"]) and math.isfinite(stats["Loss/D"]) and finite(run)
    assert stats["Loss/G/path-length"] > 0 and stats["Loss/D/r1"] >= 0
    assert any(not torch.equal(a, b) for a, b in zip(G0, run.G.parameters()))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_stylegan2_under_mixed_precision(tmp_path, precision):
    run = make_run(tmp_path, overrides=[*SG2, f"run.precision={precision}"])
    stats = train(run, max_steps=3)
    assert math.isfinite(stats["Loss/G"]) and finite(run)


def test_stylegan2_compiled_matches_eager(tmp_path):
    eager = make_run(tmp_path / "e", overrides=SG2)
    train(eager, max_steps=2)
    compiled = make_run(tmp_path / "c", overrides=[*SG2, "run.compile=true", "run.compile_backend=aot_eager"])
    train(compiled, max_steps=2)
    for a, b in zip(eager.G.parameters(), compiled.G.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_stylegan2_recipe_under_two_processes_stays_in_sync(tmp_path):
    from gan_kit.testing import write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "gan_kit", "run", str(recipe), "--nproc", "2", "--out", str(tmp_path / "ddp"),
           "--set", "run.total_kimg=0.032", "--set", "run.grad_sync=all-reduce", "--set", "run.tick_kimg=0.016"]
    for s in SG2:
        cmd += ["--set", s.replace("batch_size=8", "batch_size=16")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # the per-tick check compares the weights of both processes; a drift would have stopped the run
    from gan_kit.runs import checkpoint as ckpt

    state = ckpt.load(tmp_path / "ddp" / "checkpoints" / "latest.pt")
    assert state["cur_nimg"] == 32 and float(state["components"]["penalty[1].path-length"]["pl_mean"]) > 0
