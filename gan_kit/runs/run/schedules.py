"""A run's schedules (``Schedules``): every option the recipe schedules gets its value for the
images shown so far before each iteration.

Where each value goes (the dotted key of the recipe's ``schedules``):

=====================================  ========================================================
``optim.lr`` / ``g_lr`` / ``d_lr``     every param group's ``lr`` of the optimizers it drives
``optim.betas[i]``, ``optim.eps``      Adam's betas / eps (the lazy-regularisation correction and
                                       the phase's ``lr_scale`` applied on top, as for constants)
``ema.decay`` / ``half_life_kimg`` /   the G_ema update of the iteration
``rampup``
``penalty[i].weight``                  that penalty's ``WeightedPenalty.weight``
``<table>.<option>[item]``             the component's option: ``component.set_option(name,
                                       value)`` when it defines one, else its ``options`` replaced
                                       by ``attrs.evolve(options, name=value)``
=====================================  ========================================================

All of it is plain Python float arithmetic on the host: no tensor is made and no device is
synchronised, and the values depend on ``cur_nimg`` and ``total_nimg`` only, so a resumed run and
every process of a multi-process run set exactly what one uninterrupted process sets.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import attrs

from gan_kit.base.errors import GankitError
from gan_kit.plugin_api.components import WeightedPenalty
from gan_kit.recipe import ComponentSpec, Recipe

__all__ = ["Schedules", "set_option"]

_KEY = re.compile(r"^(?P<table>\w+)(?:\[(?P<index>\d+)\])?\.(?P<name>\w+)(?:\[(?P<item>\d+)\])?$")


def set_option(component: Any, name: str, value: Any) -> None:
    """Give ``component`` a new value of its option ``name``: its own ``set_option(name, value)``
    when it has one (a component that keeps derived state, or pushes the value into a network),
    else ``component.options = attrs.evolve(component.options, name=value)``."""
    own = getattr(component, "set_option", None)
    if own is not None:
        own(name, value)
    else:
        component.options = attrs.evolve(component.options, **{name: value})


def _with_item(current: Any, item: str | None, value: float) -> Any:
    if item is None:
        return value
    out = list(current)
    out[int(item)] = value
    return tuple(out) if isinstance(current, tuple) else out


class Schedules:
    """The recipe's schedules bound to what they drive. ``optim`` / ``ema`` are the ``[optim]`` /
    ``[ema]`` tables with the scheduled values in force; ``values`` the last value set for each
    dotted key; ``drives_optim``: whether any ``optim.*`` key is scheduled (the optimizers' settings
    are then applied after every ``apply``).

    ``build``: a component spec -> the schedule component; ``components``: the run's ``loss``,
    ``update``, ``augment`` and ``architecture`` components by table name; ``penalties``: the
    run's ``WeightedPenalty`` list in recipe order. Raises ``GankitError`` for a key no option of a
    run is called, or a table used only when the run is built."""

    def __init__(self, recipe: Recipe, build: Callable[[ComponentSpec], Any], components: Mapping[str, Any],
                 penalties: Sequence[WeightedPenalty]):
        self.recipe = recipe
        self.optim = recipe.optim
        self.ema = recipe.ema
        self.values: dict[str, float] = {}
        self._components = components
        self._penalties = penalties
        self._bound = [(spec.key, build(spec), self._target(spec.key)) for spec in recipe.schedules]
        self.drives_optim = any(spec.key.startswith("optim.") for spec in recipe.schedules)

    def _target(self, key: str) -> Callable[[float], None]:
        m = _KEY.match(key)
        if m is None:
            raise GankitError(f"{self.recipe.path}: {key}: no option of a run is called so")
        table, index, name, item = m["table"], m["index"], m["name"], m["item"]
        if table in ("optim", "ema"):
            def set_core(v: float) -> None:
                opts = getattr(self, table)
                setattr(self, table, attrs.evolve(opts, **{name: _with_item(getattr(opts, name), item, v)}))

            return set_core
        if table == "penalty" and name == "weight":
            wp = self._penalties[int(index)]

            def set_weight(v: float) -> None:
                wp.weight = v

            return set_weight
        comp = self._penalties[int(index)].penalty if table == "penalty" else self._components.get(table)
        if comp is None:
            raise GankitError(f"{self.recipe.path}: {key}: a schedule cannot drive [{table}] (it is used only when "
                              f"the run is built)")

        def set_component(v: float) -> None:
            set_option(comp, name, _with_item(getattr(comp.options, name), item, v))

        return set_component

    def __bool__(self) -> bool:
        return bool(self._bound)

    def apply(self, nimg: int, total_nimg: int) -> None:
        """Set every scheduled option to its value at ``nimg`` of ``total_nimg`` images."""
        for key, schedule, target in self._bound:
            value = float(schedule.value(nimg, total_nimg))
            target(value)
            self.values[key] = value
