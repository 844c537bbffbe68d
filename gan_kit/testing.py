"""Helpers for testing gankit plugins: a tiny recipe that trains in a second on the CPU, building
a run with extra plugin modules, and training a few steps.

::

    from gan_kit.testing import make_run, train_steps

    def test_my_loss_trains(tmp_path):
        run = make_run(tmp_path, plugins=[my_plugin], overrides=["loss.name=my-loss"])
        stats = train_steps(run, 3)
        assert math.isfinite(stats["Loss/G"])
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from gan_kit.runs.run import Run, build_run

__all__ = ["TINY_RECIPE", "write_tiny_recipe", "make_run", "train_steps"]

#: A growing PGGAN on 8x8 digits (4 -> 8 px, batch 8, hinge + gradient penalty, d-then-g) that
#: trains 0.2 kimg in about a second on one CPU thread. ``{out_dir}`` is filled in.
TINY_RECIPE = """\
[run]
seed = 0
device = "cpu"
precision = "fp32"
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


def write_tiny_recipe(folder: str | Path, name: str = "tiny.toml", extra: str = "") -> Path:
    """Write ``TINY_RECIPE`` (runs into ``folder/run``) plus ``extra`` TOML text to
    ``folder/name``; returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(TINY_RECIPE.format(out_dir=(folder / "run").as_posix()) + extra, encoding="utf-8")
    return path


def make_run(folder: str | Path, *, plugins: Iterable[ModuleType | Any] = (), overrides: Iterable[str] = (),
             recipe: str | Path | None = None) -> Run:
    """A ``Run`` of ``recipe`` (default: the tiny recipe written into ``folder``) with ``--set``
    style ``overrides`` and extra plugin modules or objects ``plugins`` (registered after the
    built-ins and entry points, as a recipe's ``plugins = [...]`` would be). Raises
    ``RecipeError`` / ``GankitError`` as ``gankit run`` would report them."""
    from gan_kit.recipe import load_recipe

    path = Path(recipe) if recipe is not None else write_tiny_recipe(folder)
    r, built = load_recipe(path, list(overrides), extra_plugins=list(plugins))
    return build_run(r, built)


def train_steps(run: Run, steps: int, **kwargs: Any) -> dict[str, Any]:
    """Train ``run`` for ``steps`` iterations (or to its end) and return the last tick's stats;
    keyword arguments go to ``gan_kit.runs.session.train`` (``resume=``, ``overwrite=``)."""
    from gan_kit.runs.session import train

    return train(run, max_steps=steps, **kwargs)
