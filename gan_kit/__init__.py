"""gankit: train GANs from a TOML recipe; every GAN decision is a swappable pluggy plugin.

Everything a plugin needs is importable from here (docs/writing-plugins.md walks through each
component kind)::

    from gan_kit import hookimpl, option, Loss, Penalty, UpdateStrategy, StepContext
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

__version__ = "0.2.0"

#: Decorator marking a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker("gankit")

from gan_kit.components import (  # noqa: E402
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
from gan_kit.errors import CheckpointError, GankitError, PluginError, RecipeError, TrainingError  # noqa: E402
from gan_kit.hookspecs import Register  # noqa: E402
from gan_kit.layers import fan_in, init_gain, set_init_gain, weight_layers  # noqa: E402
from gan_kit.options import option  # noqa: E402
from gan_kit.phase import Phase  # noqa: E402
from gan_kit.randomness import batch_rand, batch_randint, batch_randn  # noqa: E402
from gan_kit.distributed import mean_over_processes  # noqa: E402
from gan_kit.stash import Stash, StashKey  # noqa: E402
from gan_kit.step import StepContext  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from gan_kit.run import Run


def __getattr__(name: str) -> Any:
    # ``Run`` pulls in the recipe loader and the plugin manager, which import this package:
    # loaded on first use to keep ``import gan_kit`` free of cycles.
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
