"""A ``Run``'s schedules (``RunSchedules``, a part of ``gan_kit.runs.run.Run``): every option the
recipe schedules gets its value for the images shown so far before each iteration.

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
from typing import Any, Callable

import attrs

from gan_kit.base.errors import GankitError

__all__ = ["RunSchedules", "set_option"]

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


class RunSchedules:
    """``_build_schedules`` (after the optimizers) and ``apply_schedules`` (before every
    iteration). ``optim_options`` / ``ema_options`` are the ``[optim]`` / ``[ema]`` tables with
    the scheduled values in force; ``schedule_values`` the last value set for each key."""

    def _build_schedules(self) -> None:
        self.optim_options = self.recipe.optim
        self.ema_options = self.recipe.ema
        self.schedule_values: dict[str, float] = {}
        self._schedules = [(spec.key, self.build(spec), self._schedule_target(spec.key))
                           for spec in self.recipe.schedules]
        self._optim_scheduled = any(spec.key.startswith("optim.") for spec in self.recipe.schedules)
        self.apply_schedules()

    def _schedule_target(self, key: str) -> Callable[[float], None]:
        m = _KEY.match(key)
        if m is None:
            raise GankitError(f"{self.recipe.path}: {key}: no option of a run is called so")
        table, index, name, item = m["table"], m["index"], m["name"], m["item"]
        if table in ("optim", "ema"):
            attr = f"{table}_options"

            def set_core(v: float) -> None:
                opts = getattr(self, attr)
                setattr(self, attr, attrs.evolve(opts, **{name: _with_item(getattr(opts, name), item, v)}))

            return set_core
        if table == "penalty" and name == "weight":
            wp = self.penalties[int(index)]

            def set_weight(v: float) -> None:
                wp.weight = v

            return set_weight
        components = {"loss": self.loss, "update": self.strategy, "augment": self.augment, "architecture": self.arch}
        comp = self.penalties[int(index)].penalty if table == "penalty" else components.get(table)
        if comp is None:
            raise GankitError(f"{self.recipe.path}: {key}: a schedule cannot drive [{table}] (it is used only when "
                              f"the run is built)")

        def set_component(v: float) -> None:
            set_option(comp, name, _with_item(getattr(comp.options, name), item, v))

        return set_component

    def apply_schedules(self, nimg: int | None = None) -> None:
        """Set every scheduled option to its value at ``nimg`` images (default ``cur_nimg``):
        before every iteration, and when a run is built or resumed."""
        if not self._schedules:
            return
        nimg = self.cur_nimg if nimg is None else nimg
        for key, schedule, target in self._schedules:
            value = float(schedule.value(nimg, self.total_nimg))
            target(value)
            self.schedule_values[key] = value
        if self._optim_scheduled:
            self.apply_optim_settings()
