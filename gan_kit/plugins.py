"""The plugin manager: built-in plugins, the ``gankit`` entry-point group, recipe plugins.

Environment variables:
  ``GANKIT_DISABLE_PLUGIN_AUTOLOAD=1``  skip the ``gankit`` entry points (built-ins still load).
  ``GANKIT_TRACE_PLUGINS=1``            print every hook call and result to stderr (pluggy tracing).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

import attrs
import pluggy

from gan_kit import hookspecs
from gan_kit.errors import PluginError
from gan_kit.registry import KINDS, Registry

ENTRY_POINT_GROUP = "gankit"

#: Built-in plugin modules, registered by the core exactly like third-party plugins.
BUILTIN_PLUGINS = (
    "gan_kit.builtin.losses",
    "gan_kit.builtin.penalties",
    "gan_kit.builtin.strategies",
    "gan_kit.builtin.growth",
    "gan_kit.builtin.initializers",
    "gan_kit.builtin.pggan",
    "gan_kit.builtin.dcgan",
    "gan_kit.builtin.datasets",
    "gan_kit.builtin.metrics",
    "gan_kit.builtin.reporting",
    "gan_kit.builtin.checkpointing",
)


@attrs.frozen
class BrokenPlugin:
    """A plugin that failed to load: where it came from and the error it raised."""

    name: str
    source: str
    error: str


@attrs.define
class Plugins:
    """A built plugin manager with its registry of components and the plugins that failed."""

    pm: pluggy.PluginManager
    registry: Registry
    broken: list[BrokenPlugin]
    sources: dict[str, str]  # plugin name -> "built-in" or "dist x.y.z" or a recipe path

    @property
    def hook(self) -> Any:
        return self.pm.hook


def _load_module(spec: str, base_dir: Path | None) -> ModuleType:
    """Import ``spec``: a dotted module name or a path to a ``.py`` file (relative to base_dir)."""
    if spec.endswith(".py") or "/" in spec or os.sep in spec:
        path = Path(spec)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise FileNotFoundError(f"no such plugin file {str(path)!r}")
        mod_name = f"gankit_recipe_plugin_{path.stem}"
        mspec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(mspec)
        sys.modules[mod_name] = module
        mspec.loader.exec_module(module)
        return module
    return importlib.import_module(spec)




def build_plugins(
    extra: Iterable[Any] = (),
    *,
    recipe_plugins: Iterable[str] = (),
    recipe_dir: Path | None = None,
    load_entry_points: bool | None = None,
) -> Plugins:
    """Build a plugin manager and its registry.

    ``extra``: plugin objects (modules, classes or instances) to register after the built-ins,
    for tests and embedding. ``recipe_plugins``: the recipe's ``plugins = [...]`` entries.
    Raises ``PluginError`` for a misspelled hook name, a recipe plugin that fails to import, or a
    duplicate (kind, name). An entry-point plugin that fails to import is recorded in ``broken``
    instead, so the rest still works.
    """
    pm = pluggy.PluginManager("gankit")
    pm.add_hookspecs(hookspecs)
    if os.environ.get("GANKIT_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: print(msg, end="", file=sys.stderr))
        pm.enable_tracing()
    sources: dict[str, str] = {}
    broken: list[BrokenPlugin] = []

    def add(plugin: Any, name: str, source: str) -> None:
        pm.register(plugin, name=name)
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as e:
            pm.unregister(name=name)
            raise PluginError(f"plugin {source}: {e}; check the hook names in gan_kit/hookspecs.py") from None
        sources[name] = source

    for mod_name in BUILTIN_PLUGINS:
        add(importlib.import_module(mod_name), mod_name, mod_name)

    if load_entry_points is None:
        load_entry_points = not os.environ.get("GANKIT_DISABLE_PLUGIN_AUTOLOAD")
    if load_entry_points:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            source = f"{dist.name} {dist.version}" if dist else ep.value
            name = f"{ep.name} ({source})"
            try:
                plugin = ep.load()
            except Exception as e:  # a broken third-party plugin must not take gankit down
                broken.append(BrokenPlugin(ep.name, f"{source}, entry point {ep.name} = {ep.value}",
                                           f"{type(e).__name__}: {e}"))
                continue
            if pm.is_registered(plugin):
                continue
            add(plugin, name, source)

    for i, plugin in enumerate(extra):
        name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{i}"
        add(plugin, name, name)

    for spec in recipe_plugins:
        try:
            module = _load_module(spec, recipe_dir)
        except Exception as e:
            raise PluginError(f"plugins: cannot load plugin {spec!r}: {type(e).__name__}: {e}") from None
        if pm.is_registered(module):
            continue
        add(module, spec, f"recipe plugin {spec}")

    registry = Registry()
    for kind, hook_name in KINDS.items():
        hook = getattr(pm.hook, hook_name)
        # Call each implementation separately so the registry knows who registered what.
        for impl in reversed(hook.get_hookimpls()):
            source = sources.get(impl.plugin_name, impl.plugin_name)

            def register(name: str, factory: type, _kind=kind, _source=source) -> None:
                registry.add(_kind, name, factory, _source)

            impl.function(register=register)
    return Plugins(pm=pm, registry=registry, broken=broken, sources=sources)
