"""TOML recipe -> frozen attrs ``Recipe``.

Loading collects every problem of the file (syntax, unknown tables and keys, wrong types,
out-of-range numbers, unknown component names, cross-option checks of each component) and raises
one ``RecipeError`` listing them all, each as ``<file>: <dotted.key>: <what is wrong> (<fix>)``.

One job per module: ``schema`` (the core tables and the ``Recipe``), ``load`` (TOML, ``extends``,
``--set``), ``validate`` (options, components, cross-option checks), ``dump`` (resolved recipe
as data and TOML), ``problems`` (the collector).
"""

from __future__ import annotations

from gan_kit.recipe.dump import recipe_to_dict, recipe_to_toml
from gan_kit.recipe.load import load_recipe, parse_set, read_table
from gan_kit.recipe.problems import Problems
from gan_kit.recipe.schema import (COMPONENT_TABLES, CORE_TABLES, TOP_LEVEL, ComponentSpec, DataSlot, EmaOptions,
                                   MetricSlot, OptimOptions, PenaltySlot, Recipe, RunOptions)
from gan_kit.recipe.validate import build_recipe, parse_options

__all__ = [
    "RunOptions",
    "OptimOptions",
    "EmaOptions",
    "DataSlot",
    "PenaltySlot",
    "MetricSlot",
    "COMPONENT_TABLES",
    "CORE_TABLES",
    "TOP_LEVEL",
    "ComponentSpec",
    "Recipe",
    "load_recipe",
    "parse_set",
    "read_table",
    "parse_options",
    "build_recipe",
    "recipe_to_dict",
    "recipe_to_toml",
    "Problems",
]
