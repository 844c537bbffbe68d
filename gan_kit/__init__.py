"""gankit: train GANs from a TOML recipe; every GAN decision is a swappable pluggy plugin.

Public API for plugin authors::

    from gan_kit import hookimpl, option, Loss
"""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

#: Decorator marking a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker("gankit")

from gan_kit.components import (  # noqa: E402
    Architecture,
    BuildContext,
    ComponentBase,
    DatasetFactory,
    GrowthScheduler,
    Initializer,
    Loss,
    Metric,
    Penalty,
    StepContext,
    UpdateStrategy,
    WeightedPenalty,
    d_objective,
    g_objective,
    set_phase,
)
from gan_kit.errors import GankitError, PluginError, RecipeError  # noqa: E402
from gan_kit.options import option  # noqa: E402
from gan_kit.phase import Phase  # noqa: E402

__all__ = [
    "__version__",
    "hookimpl",
    "option",
    "Phase",
    "Architecture",
    "BuildContext",
    "ComponentBase",
    "DatasetFactory",
    "GrowthScheduler",
    "Initializer",
    "Loss",
    "Metric",
    "Penalty",
    "StepContext",
    "UpdateStrategy",
    "WeightedPenalty",
    "d_objective",
    "g_objective",
    "set_phase",
    "GankitError",
    "PluginError",
    "RecipeError",
]
