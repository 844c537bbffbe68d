"""Schedules in a recipe: ``{ schedule = "<name>", <its options> }`` written in place of the
value of a schedulable option (``option(..., schedulable=True)``), or of one item of an array of
floats (``betas = [0.0, { schedule = "linear", start = 0.9, end = 0.99 }]``).

``ScheduleTables`` is handed to ``parse_options`` while a recipe is validated: it parses each
schedule table into a ``ComponentSpec`` of kind ``schedule`` (its ``key`` the dotted option it
drives), leaves the schedule's value at 0 images in the option, refuses a schedule on an option
that cannot change mid-run in one line, and - once the whole recipe is known - checks the
schedule's values over the run against the option's range.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import attrs

from gan_kit.plugin_api.components import BuildContext
from gan_kit.base.options import float_typed, option_range, range_problems, schedulable, toml_value
from gan_kit.recipe.problems import Problems, describe as _describe
from gan_kit.recipe.schema import ComponentSpec
from gan_kit.plugin_api.registry import Registry, suggest

__all__ = ["ScheduleTables", "is_schedule_table", "BAD", "CHECK_POINTS"]

#: Points of the run (evenly spaced, both ends included) at which a schedule's values are checked
#: against the option's range when the recipe is loaded.
CHECK_POINTS = 1025

#: ``ScheduleTables.take``'s answer for a value with a problem (already reported).
BAD = object()


def is_schedule_table(value: Any) -> bool:
    """Whether a recipe value is a schedule table (a TOML table with a ``schedule`` key)."""
    return isinstance(value, dict) and "schedule" in value


class ScheduleTables:
    """The schedules met while one recipe is parsed (``specs``) and their fields (``fields``)."""

    def __init__(self, registry: Registry, problems: Problems, parse: Callable[..., Any]):
        self.registry, self.problems, self.parse = registry, problems, parse
        self.total_nimg = 100_000  # run.total_kimg's default until [run] is parsed
        self.specs: list[ComponentSpec] = []
        self.fields: dict[str, attrs.Attribute] = {}

    def take(self, value: Any, f: attrs.Attribute, dotted: str, refuse: str | None = None,
             owner: str = "") -> tuple[Any, frozenset[str]]:
        """``value`` with each schedule table in it replaced by the schedule's value at 0 images,
        and the dotted keys scheduled; ``(BAD, ...)`` after reporting a problem. ``refuse``: why
        this table takes no schedule at all (its component is used only when the run is built)."""
        if isinstance(value, list) and any(is_schedule_table(v) for v in value):
            items = [(f"{dotted}[{i}]", v) for i, v in enumerate(value)]
        elif is_schedule_table(value):
            items = [(dotted, value)]
        else:
            if isinstance(value, dict) and schedulable(f) and float_typed(f) and not refuse:
                # A table where a float goes: a schedule table whose ``schedule`` key is misspelt
                # or missing, which the type check would only call "expected float, got table".
                wrong = next((k for k in value if suggest(str(k), ["schedule"])), None)
                what = (f"{wrong!r} is no key of a schedule table{suggest(str(wrong), ['schedule'])}" if wrong is not None
                        else "a table without a 'schedule' key")
                self.problems.add(dotted, f"{what}; a schedule table names its shape, e.g. {{schedule = \"cosine\", "
                                          f"start = 0.5, end = 0.0}}, or write a constant")
                return BAD, frozenset()
            return value, frozenset()
        if refuse or not schedulable(f) or not float_typed(f):
            name = dotted.rsplit(".", 1)[-1]
            why = refuse or (f"{name} is fixed for the run, not a schedulable option of {owner or 'its table'}"
                             if not schedulable(f) else
                             f"{name} is not a float option (a plugin bug: only floats may be schedulable)")
            self.problems.add(dotted, f"a schedule is not allowed here: {why} (write a constant, e.g. "
                                      f"{name} = {_example(f)}; only options marked Schedulable in gankit "
                                      f"list-plugins -v take one)")
            return BAD, frozenset()
        out = list(value) if isinstance(value, list) else None
        keys = []
        for i, (key, table) in enumerate(items):
            if not is_schedule_table(table):
                continue
            v = self._parse(table, key, f)
            if v is BAD:
                return BAD, frozenset()
            keys.append(key)
            if out is None:
                return v, frozenset(keys)
            out[i] = v
        return out, frozenset(keys)

    def _parse(self, table: dict, key: str, f: attrs.Attribute) -> Any:
        names = self.registry.names("schedule")
        name = table["schedule"]
        if not isinstance(name, str) or ("schedule", name) not in self.registry:
            what = f"unknown schedule {name!r}{suggest(name, names)}" if isinstance(name, str) else \
                f"expected a schedule name, got {_describe(name)}"
            self.problems.add(f"{key}.schedule", f"{what}; available: {', '.join(names)}")
            return BAD
        comp = self.registry.get("schedule", name)
        rest = {k: v for k, v in table.items() if k != "schedule"}
        opts = self.parse(comp.Options, rest, None, key, self.problems, extra_known=("schedule",),
                          owner=f"schedule {name!r}", range_fix="see gankit list-plugins --kind schedule -v")
        if opts is None:
            return BAD
        found = list(getattr(comp.factory, "problems", lambda o, r: ())(opts, None) or ())
        for sub, msg in found:
            self.problems.add(f"{key}.{sub}" if sub else key, msg)
        if found:
            return BAD
        try:
            start = float(comp.factory(opts, BuildContext()).value(0, self.total_nimg))
        except Exception as e:  # a plugin's shape that fails is told as the recipe's problem
            self.problems.add(key, f"schedule {name!r} failed at 0 images: {type(e).__name__}: {e} "
                                   f"(check its options)")
            return BAD
        self.specs.append(ComponentSpec(kind="schedule", name=name, options=opts, key=key))
        self.fields[key] = f
        return start

    def check(self, total_nimg: int) -> None:
        """Report each schedule whose value leaves its option's range somewhere in the run."""
        for spec in self.specs:
            f = self.fields[spec.key]
            rng = option_range(f)
            if rng.min == 0 and rng.min_exclusive:  # a warm-up may start at 0 (a learning rate)
                rng = attrs.evolve(rng, min_exclusive=False)
            comp = self.registry.get("schedule", spec.name)
            shape = comp.factory(spec.options, BuildContext())
            for i in range(CHECK_POINTS):
                nimg = total_nimg * i // (CHECK_POINTS - 1)
                try:
                    v = float(shape.value(nimg, total_nimg))
                except Exception as e:
                    self.problems.add(spec.key, f"schedule {spec.name!r} failed at {nimg / 1000:g} kimg: "
                                                f"{type(e).__name__}: {e} (check its options)")
                    break
                bad = range_problems(v, rng)
                if bad:
                    msg = bad[0][1].split(", got ")[0]
                    hint = rng.hint
                    if isinstance(hint, tuple):  # one hint per array item: this item's
                        item = re.search(r"\[(\d+)\]$", spec.key)
                        hint = hint[int(item[1])] if item and int(item[1]) < len(hint) else None
                    fix = hint or rng.default_fix(bad[0][1])
                    self.problems.add(spec.key, f"schedule {spec.name!r} gives {v:.6g} at {nimg / 1000:g} kimg of "
                                                f"{total_nimg / 1000:g}, which {msg.replace('must be', 'is not')} "
                                                f"({fix}; change the schedule's values)")
                    break


def _example(f: attrs.Attribute) -> str:
    default = f.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    return toml_value(default) if default is not attrs.NOTHING and default is not None else "..."
