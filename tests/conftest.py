"""Shared fixtures: tiny recipes that train in a second on the CPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch


TINY_RECIPE = """
[run]
seed = 0
device = "cpu"
out_dir = "{out_dir}"
total_kimg = 0.2
tick_kimg = 0.1
snapshot_ticks = 0
sample_grid = 4
progress = false

[data]
name = "digits"
resolution = 8

[architecture]
name = "pggan"
latent_dim = 8
fmap_base = 64
fmap_max = 8
mbstd_group_size = 4

[init]
name = "equalized-lr"

[loss]
name = "hinge"

[[penalty]]
name = "gradient-penalty"
weight = 10.0

[update]
name = "d-then-g"

[growth]
name = "progressive"
start_resolution = 4
fade_kimg = 0.04
stable_kimg = 0.04
batch_size = 8

[optim]
lr = 0.001
betas = [0.0, 0.99]

[ema]
decay = 0.9
"""


@pytest.fixture
def tiny_recipe_text(tmp_path: Path) -> str:
    """TOML of a tiny growing recipe (8x8 digits, 4 -> 8 px, batch 8) writing under tmp_path."""
    return TINY_RECIPE.format(out_dir=(tmp_path / "run").as_posix())


@pytest.fixture
def write_recipe(tmp_path: Path):
    """``write_recipe(text, name="r.toml") -> Path``: write a recipe file into tmp_path."""

    def write(text: str, name: str = "r.toml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def tiny_recipe(tmp_path: Path, tiny_recipe_text: str, write_recipe) -> Path:
    """Path of the tiny recipe file."""
    return write_recipe(tiny_recipe_text, "tiny.toml")


# One intra-op thread: the tests use tiny tensors, where a second thread only adds
# synchronisation (and, on a shared 2-core machine, contention between test processes).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
