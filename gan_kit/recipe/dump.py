"""Writing a resolved recipe: plain TOML-able data and TOML text, every default filled in
(what ``gankit recipe show`` prints and a run directory's ``recipe.toml`` holds)."""

from __future__ import annotations

import re
import typing
from typing import Any

import attrs

from gan_kit.base.options import toml_key, toml_value
from gan_kit.recipe.schema import CORE_TABLES, ComponentSpec, Recipe

__all__ = ["recipe_to_dict", "recipe_to_toml"]


def _toml_able(value: Any) -> Any:
    """Tuples as lists, table keys as strings, and None entries of tables left out (TOML has no
    null; a left-out option loads as its default)."""
    if isinstance(value, dict):
        return {str(k): _toml_able(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_toml_able(v) for v in value]
    return value


def _options(obj: Any) -> dict:
    """The fields of attrs options ``obj`` by name; a None whose default is not None is written
    ``"none"`` (how a recipe spells it), since a left-out key would load as the default - ADA's
    ``target = "none"`` would come back as 0.6, ``ema.rampup = "none"`` as 0.05."""
    out = {}
    try:
        hints = typing.get_type_hints(type(obj))
    except Exception:  # an annotation that does not resolve: keep the old rule (left out)
        hints = {}
    for f in attrs.fields(type(obj)):
        value = getattr(obj, f.name)
        # A ``str | None`` option would read "none" back as the string, so it stays left out.
        if (value is None and f.default is not None and f.default is not attrs.NOTHING
                and f.name in hints and str not in typing.get_args(hints[f.name])):
            value = "none"
        out[f.name] = value
    return out


def _spec_table(spec: ComponentSpec) -> dict:
    table = {"name": spec.name}
    if spec.slot is not None:
        table.update(_options(spec.slot))
    table.update(_options(spec.options))
    return _toml_able(table)


def recipe_to_dict(recipe: Recipe) -> dict:
    """The resolved recipe as plain TOML-able data, every default filled in."""
    out: dict[str, Any] = {}
    if recipe.plugins:
        out["plugins"] = list(recipe.plugins)
    if recipe.disable_plugins:
        out["disable_plugins"] = list(recipe.disable_plugins)
    for key in CORE_TABLES:
        out[key] = _toml_able(_options(getattr(recipe, key)))
    out["data"] = _spec_table(recipe.data)
    for key in ("architecture", "init", "loss"):
        out[key] = _spec_table(getattr(recipe, key))
    if recipe.penalties:
        out["penalty"] = [_spec_table(s) for s in recipe.penalties]
    for key in ("update", "growth"):
        out[key] = _spec_table(getattr(recipe, key))
    if recipe.metrics:
        out["metric"] = [_spec_table(s) for s in recipe.metrics]
    out["augment"] = _spec_table(recipe.augment)
    if recipe.trackers:
        out["tracker"] = [_spec_table(s) for s in recipe.trackers]
    for spec in recipe.schedules:  # each schedule table back in place of its option's start value
        _put(out, spec.key, _toml_able({"schedule": spec.name, **attrs.asdict(spec.options, recurse=False)}))
    return out


def _put(table: dict, key: str, value: Any) -> None:
    """``table[...] = value`` at a dotted key with array items: ``penalty[0].weight``, ``optim.betas[1]``."""
    parts = [int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", key) if p]
    node: Any = table
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value


def recipe_to_toml(recipe: Recipe, header: str = "") -> str:
    """The resolved recipe as TOML text (loadable again with the same result)."""
    parts = []
    for key, value in recipe_to_dict(recipe).items():  # tables in recipe order, [[arrays]] in place
        if isinstance(value, dict):
            parts.append(f"[{key}]\n" + "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in value.items()))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                parts.append(f"[[{key}]]\n" + "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in item.items()))
        else:
            parts.append(f"{toml_key(key)} = {toml_value(value)}\n")
    text = "\n".join(p.rstrip("\n") + "\n" for p in parts)
    return (header + "\n" if header else "") + text
