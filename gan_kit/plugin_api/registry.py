"""The component registry: which plugin registered which (kind, name), and lookup by name."""

from __future__ import annotations

import difflib
import inspect
from typing import Iterator

import attrs

from gan_kit.base.errors import PluginError
from gan_kit.base.options import float_typed, option_fields, schedulable

#: Component kinds, the registration hook of each, and the recipe table naming it.
KINDS: dict[str, str] = {
    "loss": "register_losses",
    "penalty": "register_penalties",
    "update": "register_update_strategies",
    "growth": "register_growth_schedulers",
    "init": "register_initializers",
    "architecture": "register_architectures",
    "dataset": "register_datasets",
    "metric": "register_metrics",
    "augment": "register_augmentations",
    "tracker": "register_trackers",
    "schedule": "register_schedules",
    "distance": "register_distances",
    "importer": "register_importers",
    "backbone": "register_backbones",
}


#: Kinds whose components are used only when the run is built (or never in training): a schedule
#: could not change their options mid-run (the recipe refuses one there too).
BUILT_ONCE_KINDS = ("dataset", "init", "growth", "metric", "tracker", "schedule", "distance", "importer",
                    "backbone")

#: Kinds no training run uses (``gankit project`` builds its distance; a model file of another
#: codebase is read by its importer before any run exists).
NOT_TRAINING_KINDS = ("distance", "importer")


def _schedulable_problem(kind: str, options: type) -> str | None:
    """Why an Options class's ``schedulable=True`` cannot work, found when the plugin registers
    rather than when a recipe first schedules the option."""
    try:
        fields = option_fields(options)
    except Exception:  # an annotation that does not resolve: the recipe loader reports it in context
        return None
    for f in fields:
        if not schedulable(f):
            continue
        if kind in BUILT_ONCE_KINDS:
            used = "is never part of training" if kind in NOT_TRAINING_KINDS else "is used only when the run is built"
            return f"option {f.name!r} is declared schedulable, but a {kind} {used} (drop schedulable=True)"
        if not float_typed(f):
            shown = getattr(f.type, "__name__", None) or str(f.type)
            return (f"option {f.name!r} is declared schedulable but is not a float ({shown}); only float options "
                    f"can follow a schedule (drop schedulable=True, or make it a float)")
    return None


@attrs.frozen
class Component:
    """One registered component.

    ``factory`` is called as ``factory(options, context)``; ``Options`` is its frozen attrs
    options class (an empty one when the factory declares none); ``plugin`` names the plugin
    (module name or ``distribution x.y.z``) that registered it.
    """

    kind: str
    name: str
    factory: type
    Options: type
    plugin: str

    @property
    def summary(self) -> str:
        """The docstring's first paragraph on one line (a first sentence wrapped over two
        source lines is not cut after the first)."""
        doc = (inspect.getdoc(self.factory) or "").strip()
        return " ".join(doc.split("\n\n")[0].split())


@attrs.frozen
class _NoOptions:
    pass


def suggest(name: str, choices: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def is_family(name: str) -> bool:
    """Whether a registered name stands for a family of names (``fid<N>k_full``): it holds a
    ``<...>`` placeholder, and its factory's ``for_name(name)`` gives the factory of one member
    (``fid50k_full``), or None for a name outside the family."""
    return "<" in name and ">" in name


class Registry:
    """All components, keyed by (kind, name). A name with a ``<...>`` placeholder registers a
    family (``is_family``): ``get`` and ``in`` resolve a member's name through the family's
    ``for_name``, after the exact names."""

    def __init__(self) -> None:
        self._components: dict[tuple[str, str], Component] = {}
        self._members: dict[tuple[str, str], Component] = {}

    def add(self, kind: str, name: str, factory: type, plugin: str) -> None:
        if kind not in KINDS:
            raise PluginError(f"plugin {plugin}: unknown component kind {kind!r}")
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin}: {kind} name must be a non-empty string, got {name!r}")
        key = (kind, name)
        if key in self._components:
            other = self._components[key].plugin
            raise PluginError(
                f"{kind} {name!r} is registered twice: by {other} and by {plugin} "
                f"(uninstall one of the two plugins, or rename one of the two components)"
            )
        options = getattr(factory, "Options", None) or _NoOptions
        if not attrs.has(options):
            raise PluginError(f"plugin {plugin}: {kind} {name!r}: Options must be an attrs class")
        problem = _schedulable_problem(kind, options)
        if problem:
            raise PluginError(f"plugin {plugin}: {kind} {name!r}: {problem}")
        if is_family(name) and not callable(getattr(factory, "for_name", None)):
            raise PluginError(f"plugin {plugin}: {kind} {name!r} names a family (a <...> placeholder), so its "
                              f"factory needs a classmethod for_name(name) giving one member's factory or None")
        self._components[key] = Component(kind, name, factory, options, plugin)

    def registered(self, kind: str) -> list[Component]:
        """The components of ``kind`` in the order they were registered (built-ins first)."""
        return [c for (k, _), c in self._components.items() if k == kind]

    def names(self, kind: str) -> list[str]:
        return sorted(n for k, n in self._components if k == kind)

    def _member(self, kind: str, name: str) -> Component | None:
        """The component of ``name`` as a member of a registered family, or None."""
        key = (kind, name)
        if key in self._members:
            return self._members[key]
        for comp in self.registered(kind):
            if not is_family(comp.name):
                continue
            factory = comp.factory.for_name(name)
            if factory is not None:
                options = getattr(factory, "Options", None) or _NoOptions
                self._members[key] = Component(kind, name, factory, options, comp.plugin)
                return self._members[key]
        return None

    def get(self, kind: str, name: str) -> Component:
        """The component, or ``KeyError`` whose message lists choices and a suggestion."""
        found = self._components.get((kind, name)) or (None if is_family(name) else self._member(kind, name))
        if found is None:
            names = self.names(kind)
            raise KeyError(
                f"unknown {kind} {name!r}{suggest(name, names)}; available: {', '.join(names)}"
            )
        return found

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._components or (not is_family(key[1]) and self._member(*key) is not None)

    def __iter__(self) -> Iterator[Component]:
        kinds = list(KINDS)
        return iter(sorted(self._components.values(), key=lambda c: (kinds.index(c.kind), c.name)))

    def __len__(self) -> int:
        return len(self._components)
