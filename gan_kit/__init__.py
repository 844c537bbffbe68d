"""gankit: train GANs from a TOML recipe; every GAN decision is a swappable pluggy plugin.

Everything a plugin needs is importable from here (docs/writing-plugins.md walks through each
component kind)::

    from gan_kit import hookimpl, option, Loss, Penalty, UpdateStrategy, StepContext
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gan_kit.components import (
    Architecture,
    Augment,
    BuildContext,
    DatasetFactory,
    DInputs,
    LabelBound,
    GInputs,
    Growable,
    GrowthScheduler,
    Initializer,
    Loss,
    Metric,
    Penalty,
    UpdateStrategy,
    WeightedPenalty,
)
from gan_kit.errors import CheckpointError, GankitError, PluginError, RecipeError, TrainingError
from gan_kit.hookspecs import Register, hookimpl
from gan_kit.imagesets import ImageBatches
from gan_kit.layers import fan_in, init_gain, set_init_gain, weight_layers
from gan_kit.options import option
from gan_kit.phase import Phase
from gan_kit.randomness import batch_rand, batch_randint, batch_randn
from gan_kit.distributed import mean_over_processes
from gan_kit.stash import Stash, StashKey
from gan_kit.step import StepContext
from gan_kit.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from gan_kit.run import Run


def __getattr__(name: str) -> Any:
    # ``Run`` sits in the run layer (recipe loader, plugin manager, checkpoints; see the layers
    # contract in pyproject.toml): loaded on first use, so importing the public API - what every
    # plugin module does, built-in ones while the plugin manager loads them - stays light.
    if name == "Run":
        from gan_kit.run import Run

        return Run
    raise AttributeError(f"module 'gan_kit' has no attribute {name!r}")


__all__ = [
    "__version__",
    "hookimpl",
    "option",
    "Register",
    # component kinds
    "Architecture",
    "Augment",
    "DatasetFactory",
    "GrowthScheduler",
    "Initializer",
    "Loss",
    "Metric",
    "Penalty",
    "UpdateStrategy",
    # what components receive
    "BuildContext",
    "ImageBatches",
    "StepContext",
    "DInputs",
    "LabelBound",
    "GInputs",
    "WeightedPenalty",
    "Phase",
    "Growable",
    "Run",
    "Stash",
    "StashKey",
    # layer helpers for initializers and architectures
    "weight_layers",
    "fan_in",
    "init_gain",
    "set_init_gain",
    # per-sample random draws that match across process counts
    "batch_rand",
    "batch_randn",
    "batch_randint",
    # a statistic of the global batch (identity with one process)
    "mean_over_processes",
    # errors
    "GankitError",
    "PluginError",
    "RecipeError",
    "CheckpointError",
    "TrainingError",
]
