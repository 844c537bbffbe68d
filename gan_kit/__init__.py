"""gankit: train GANs from a TOML recipe; every GAN decision is a swappable pluggy plugin.

Everything a plugin needs is importable from here (docs/writing-plugins.md walks through each
component kind)::

    from gan_kit import hookimpl, option, Loss, Penalty, UpdateStrategy, StepContext
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gan_kit.plugin_api.components import (
    Architecture,
    Augment,
    Backbone,
    BuildContext,
    DatasetFactory,
    Distance,
    DInputs,
    LabelBound,
    GInputs,
    Growable,
    GrowthScheduler,
    Importer,
    Initializer,
    Loss,
    Metric,
    Penalty,
    StyleGenerator,
    Tracker,
    UpdateStrategy,
    WeightedPenalty,
)
from gan_kit.base.errors import (CheckpointError, GankitError, Interrupted, PluginError, RecipeError, TrainingError,
                                 keep_secret, redact)
from gan_kit.plugin_api.hookspecs import Register, hookimpl
from gan_kit.plugin_api.foreign import ForeignFile, ImportedModel
from gan_kit.plugin_api.pickles import PickledModule, PickledTFNetwork, UnsafePickleError, read_pickle
from gan_kit.training.imagesets import ImageBatches
from gan_kit.base.conditional_norm import ConditionalBatchNorm2d
from gan_kit.base.layers import fan_in, init_gain, set_init_gain, weight_layers
from gan_kit.base.options import option, toml_value
from gan_kit.plugin_api.ownership import FrozenFile, load_frozen, own_init
from gan_kit.base.phase import Phase
from gan_kit.base.randomness import batch_rand, batch_randint, batch_randn
from gan_kit.plugin_api.schedules import Schedule, warmed_up
from gan_kit.training.distributed import mean_over_processes
from gan_kit.base.stash import Stash, StashKey
from gan_kit.training.step import StepContext
from gan_kit.base.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from gan_kit.cli.errors import user_errors
    from gan_kit.plugin_api.manager import component_class
    from gan_kit.recipe import load_recipe, parse_set, read_table, recipe_to_toml
    from gan_kit.recipe.datachecks import metric_problem
    from gan_kit.recipe import recipe_to_dict
    from gan_kit.runs.checkpoint import load as load_checkpoint
    from gan_kit.runs.layout import CheckpointLayout
    from gan_kit.runs.lock import lock_problem
    from gan_kit.runs.run import Run, build_run
    from gan_kit.tools.report import REPORT_CSS

# Names from the layers above the plugin API, loaded on first use: importing the public API -
# what every plugin module does, built-in ones while the plugin manager loads them - stays light
# (and the plugin manager is not imported while it imports the built-ins). Name -> (module, name).
_LAZY = {
    "Run": ("gan_kit.runs.run", "Run"),
    "build_run": ("gan_kit.runs.run", "build_run"),
    "component_class": ("gan_kit.plugin_api.manager", "component_class"),
    "load_recipe": ("gan_kit.recipe", "load_recipe"),
    "parse_set": ("gan_kit.recipe", "parse_set"),
    "read_table": ("gan_kit.recipe", "read_table"),
    "recipe_to_toml": ("gan_kit.recipe", "recipe_to_toml"),
    "recipe_to_dict": ("gan_kit.recipe", "recipe_to_dict"),
    "metric_problem": ("gan_kit.recipe.datachecks", "metric_problem"),
    "load_checkpoint": ("gan_kit.runs.checkpoint", "load"),
    "CheckpointLayout": ("gan_kit.runs.layout", "CheckpointLayout"),
    "lock_problem": ("gan_kit.runs.lock", "lock_problem"),
    "REPORT_CSS": ("gan_kit.tools.report", "REPORT_CSS"),
    "user_errors": ("gan_kit.cli.errors", "user_errors"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'gan_kit' has no attribute {name!r}")


__all__ = [
    "__version__",
    "hookimpl",
    "option",
    "Register",
    # component kinds
    "Architecture",
    "Augment",
    "Backbone",
    "DatasetFactory",
    "Distance",
    "GrowthScheduler",
    "Importer",
    "Initializer",
    "Loss",
    "Metric",
    "Tracker",
    "Penalty",
    "Schedule",
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
    # a G with per-layer styles (mapping, synthesis, num_ws, w_dim, w_avg): style mixing, W files
    "StyleGenerator",
    "Run",
    "build_run",
    "Stash",
    "StashKey",
    # layer helpers for initializers and architectures
    "weight_layers",
    "fan_in",
    "init_gain",
    "set_init_gain",
    # batch norm with gain and bias from a conditioning vector (SNGAN's / BigGAN's class-conditional G)
    "ConditionalBatchNorm2d",
    # who owns which weights: the architecture's own initialisation, frozen sub-networks from files
    "own_init",
    "load_frozen",
    "FrozenFile",
    # a linear warm-up for schedule shapes
    "warmed_up",
    # per-sample random draws that match across process counts
    "batch_rand",
    "batch_randn",
    "batch_randint",
    # a statistic of the global batch (identity with one process)
    "mean_over_processes",
    # model files of other codebases: what an importer reads and returns, the safe pickle reader
    "ForeignFile",
    "ImportedModel",
    "read_pickle",
    "PickledModule",
    "PickledTFNetwork",
    "UnsafePickleError",
    # errors
    "GankitError",
    "Interrupted",
    "PluginError",
    "RecipeError",
    "CheckpointError",
    "TrainingError",
    # secrets kept out of printed lines (a database password in a storage URL)
    "keep_secret",
    "redact",
    "Interrupted",
    # for tools beside the training loop (commands added through register_commands, such as the
    # gankit-sweep plugin's `gankit sweep` / `gankit compare`)
    "user_errors",
    "component_class",
    "load_recipe",
    "parse_set",
    "read_table",
    "recipe_to_toml",
    "recipe_to_dict",
    "toml_value",
    "metric_problem",
    "load_checkpoint",
    "CheckpointLayout",
    "lock_problem",
    "REPORT_CSS",
]
