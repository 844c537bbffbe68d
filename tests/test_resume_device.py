"""Resume is exact whatever device the checkpoint's tensors were mapped to: the RNG states go
back on the host (``torch.set_rng_state`` takes a CPU ByteTensor only, so a checkpoint mapped to
a GPU used to fail with "RNG state must be a torch.ByteTensor"), numpy's state likewise, and the
run's weights are copied to where its networks live."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit import hookimpl
from gan_kit.runs.session import train
from gan_kit.base.errors import CheckpointError
from gan_kit.recipe import load_recipe
from gan_kit.runs.run import build_run

SHORT = ["run.total_kimg=0.096", "run.tick_kimg=0.032"]


def build(path, out, overrides=()):
    recipe, plugins = load_recipe(path, [f"run.out_dir='{out}'", *SHORT, *overrides])
    return build_run(recipe, plugins)


def weights(run):
    return {f"{n}.{k}": v.clone() for n in ("G", "D", "G_ema") for k, v in getattr(run, n).state_dict().items()}


class DeviceBack:
    """Gives the run its real device back once the resume is done (``run_started``)."""

    def __init__(self, device):
        self.device = device

    @hookimpl
    def run_started(self, run):
        run.device = self.device


def test_resume_is_exact_when_the_run_device_is_not_where_tensors_can_be_read(tiny_recipe, tmp_path):
    """The run's device decides nothing about where the checkpoint is read: with ``run.device``
    a device that holds no data while it resumes (``meta``, standing in for a GPU, whose RNG
    states ``torch.set_rng_state`` refuses), weights, optimizers and every RNG are restored
    exactly and the run ends as the one never interrupted."""
    straight = build(tiny_recipe, tmp_path / "straight")
    train(straight)
    first = build(tiny_recipe, tmp_path / "split")
    train(first, max_steps=5)
    first.save_checkpoint("latest")
    resumed = build(tiny_recipe, tmp_path / "split")
    resumed.plugins.pm.register(DeviceBack(resumed.device))
    resumed.device = torch.device("meta")  # what the checkpoint used to be mapped to
    train(resumed, resume=True)
    a, b = weights(straight), weights(resumed)
    assert resumed.step == straight.step
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_rng_states_are_restored_on_the_host_from_any_map_location(tmp_path):
    """``set_rng_state`` takes the states as ``torch.load`` left them: the torch and numpy
    states go back on the CPU and the next draws repeat; a state with no data (``meta``) is a
    one-line ``CheckpointError``, not a TypeError."""
    torch.manual_seed(3)
    np.random.seed(3)
    ckpt.save_atomic({"rng": ckpt.rng_state()}, tmp_path / "r.pt")
    expected = torch.rand(4), np.random.rand(4)
    state = ckpt.load(tmp_path / "r.pt", map_location="cpu")
    torch.manual_seed(99)
    np.random.seed(99)
    ckpt.set_rng_state(state["rng"])
    assert torch.equal(torch.rand(4), expected[0]) and np.array_equal(np.random.rand(4), expected[1])
    meta = ckpt.load(tmp_path / "r.pt", map_location="meta")
    with pytest.raises(CheckpointError, match="map_location='cpu'"):
        ckpt.set_rng_state(meta["rng"])
