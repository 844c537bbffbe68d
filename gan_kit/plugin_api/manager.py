"""The plugin manager: built-in plugins, the ``gankit`` entry-point group, recipe plugins.

Environment variables:
  ``GANKIT_DISABLE_PLUGIN_AUTOLOAD=1``  skip the ``gankit`` entry points (built-ins still load).
  ``GANKIT_DISABLE_PLUGINS=a,b``        do not load the plugins named (as ``gankit plugins`` lists
                                        them; a built-in may be named by its last part, e.g.
                                        ``tensorboard``). The recipe key ``disable_plugins`` adds names.
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

from gan_kit.plugin_api import hookspecs
from gan_kit.base.errors import PluginError
from gan_kit.plugin_api.registry import KINDS, Registry, suggest

ENTRY_POINT_GROUP = "gankit"

#: Built-in plugin modules, registered by the core exactly like third-party plugins.
BUILTIN_PLUGINS = (
    "gan_kit.builtin.objectives.losses",
    "gan_kit.builtin.objectives.penalties",
    "gan_kit.builtin.objectives.logit_penalties",
    "gan_kit.builtin.objectives.orthogonal",
    "gan_kit.builtin.objectives.class_heads",
    "gan_kit.builtin.objectives.strategies",
    "gan_kit.builtin.architectures.growth",
    "gan_kit.builtin.architectures.initializers",
    "gan_kit.builtin.architectures.pggan",
    "gan_kit.builtin.architectures.dcgan",
    "gan_kit.builtin.architectures.stylegan2",
    "gan_kit.builtin.architectures.r3gan",
    "gan_kit.builtin.architectures.studiogan",
    "gan_kit.builtin.architectures.stylegan3",
    "gan_kit.builtin.data.datasets",
    "gan_kit.builtin.data.torchvision_sets",
    "gan_kit.builtin.metrics",
    "gan_kit.builtin.metrics.inception",
    "gan_kit.builtin.metrics.protocols",
    "gan_kit.builtin.metrics.backbones",
    "gan_kit.builtin.metrics.equivariance",
    "gan_kit.builtin.augment",
    "gan_kit.builtin.augment.ada",
    "gan_kit.builtin.augment.apa",
    "gan_kit.builtin.schedules",
    "gan_kit.builtin.distances",
    "gan_kit.builtin.distances.lpips",
    "gan_kit.builtin.importers.snapshots",
    "gan_kit.builtin.reporting",
    "gan_kit.builtin.reporting.tensorboard",
    "gan_kit.builtin.reporting.checkpointing",
    "gan_kit.builtin.reporting.trackers",
)


@attrs.frozen
class BrokenPlugin:
    """An entry-point plugin that failed to import: its entry point, distribution and error.

    ``name``: the entry point's name; ``source``: ``"<dist> <version>, entry point gankit: <name> =
    <value>"``; ``error``: ``"<ExceptionType>: <message>"``.
    """

    name: str
    source: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.name} ({self.source}) failed to load: {self.error}"


@attrs.frozen
class PluginInfo:
    """One loaded plugin: its name (what ``GANKIT_DISABLE_PLUGINS`` takes), where it came from
    (module, ``"<dist> <version>"`` or ``"recipe plugin <spec>"``) and the hooks it implements."""

    name: str
    source: str
    hooks: tuple[str, ...]
    version: str = ""


@attrs.define
class Plugins:
    """A built plugin manager with its registry of components and the plugins that failed."""

    pm: pluggy.PluginManager
    registry: Registry
    broken: list[BrokenPlugin]
    sources: dict[str, str]  # plugin name -> its module, "<dist> <version>" or "recipe plugin <spec>"
    disabled: tuple[str, ...] = ()
    #: Disabled names that matched no plugin (a typo, most likely).
    unknown_disabled: tuple[str, ...] = ()

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def describe(self) -> list[PluginInfo]:
        """Every loaded plugin, hook-only plugins included, in load order."""
        out = []
        for name, source in self.sources.items():
            plugin = self.pm.get_plugin(name)
            hooks = tuple(sorted(c.name for c in self.pm.get_hookcallers(plugin) or ()))
            if name in BUILTIN_PLUGINS:
                from gan_kit.base.version import __version__

                version = f"gankit {__version__}"
            elif source.startswith("recipe plugin") or " " not in source:
                version = getattr(plugin, "__version__", "") or "-"
            else:
                version = source  # "<distribution> <version>"
            out.append(PluginInfo(name, source, hooks, version))
        return out


def disabled_names(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Plugin names switched off by ``GANKIT_DISABLE_PLUGINS`` (comma-separated) and ``extra``."""
    names = [n.strip() for n in os.environ.get("GANKIT_DISABLE_PLUGINS", "").split(",") if n.strip()]
    return tuple(dict.fromkeys([*names, *extra]))


def _is_disabled(name: str, disabled: Iterable[str]) -> bool:
    """``name`` (a module, ``"<entry point> (<dist> <version>)"`` or a recipe plugin's ``.py``
    path) is switched off by its full name, its part before `` (``, its last dotted part (a
    built-in: ``tensorboard``), or - for a file - its file name or stem."""
    base = name.split(" (")[0]
    if base.endswith(".py") or "/" in base or os.sep in base:
        short = {Path(base).name, Path(base).stem}
    else:
        short = {base.rsplit(".", 1)[-1]}
    return any(d == name or d == base or d in short for d in disabled)


def autoload_disabled() -> bool:
    """True when ``GANKIT_DISABLE_PLUGIN_AUTOLOAD`` is set to anything but ``""``, ``0``, ``false``, ``no``."""
    value = os.environ.get("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def _load_module(spec: str, base_dir: Path | None) -> ModuleType:
    """Import ``spec``: a dotted module name or a path to a ``.py`` file (relative to base_dir)."""
    if not spec:
        raise ValueError("empty plugin name")
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
        try:
            mspec.loader.exec_module(module)
        except BaseException:
            del sys.modules[mod_name]
            raise
        return module
    return importlib.import_module(spec)


def _hook_names() -> list[str]:
    return sorted(n for n in dir(hookspecs) if getattr(getattr(hookspecs, n), "gankit_spec", None) is not None)


def _validate(pm: pluggy.PluginManager, plugin: Any, source: str) -> None:
    """Raise ``PluginError`` for a hook implementation whose name is no gankit hook, or a
    function named like a hook but not marked with ``@hookimpl`` (pluggy would ignore it)."""
    names = _hook_names()
    for name in names:
        fn = getattr(plugin, name, None)
        if callable(fn) and not hasattr(fn, "gankit_impl"):
            raise PluginError(f"plugin {source}: {name} is not marked with @gan_kit.hookimpl, so it would be ignored "
                              f"(put @hookimpl above it)")
    for caller in pm.get_hookcallers(plugin) or ():
        if caller.has_spec():
            continue
        if all(impl.optionalhook for impl in caller.get_hookimpls() if impl.plugin is plugin):
            continue
        raise PluginError(
            f"plugin {source}: {caller.name!r} is not a gankit hook{suggest(caller.name, names)} "
            f"(rename the @hookimpl function; hooks: {', '.join(names)})")
    pm.check_pending()


def build_plugins(
    extra: Iterable[Any] = (),
    *,
    recipe_plugins: Iterable[str] = (),
    recipe_dir: Path | None = None,
    load_entry_points: bool | None = None,
    failed: list[tuple[int, str, str]] | None = None,
    disable: Iterable[str] = (),
) -> Plugins:
    """Build a plugin manager and its registry.

    Order: the built-ins, the ``gankit`` entry points (unless ``load_entry_points`` is False, or
    None and ``GANKIT_DISABLE_PLUGIN_AUTOLOAD`` is set), ``extra`` plugin objects (modules,
    classes or instances, for tests and embedding), then the recipe's ``plugins = [...]``
    entries (module names or ``.py`` paths relative to ``recipe_dir``).

    Plugins named in ``disable`` or ``GANKIT_DISABLE_PLUGINS`` are not registered.

    Raises ``PluginError`` for a misspelled hook name, a duplicate (kind, name), or a recipe
    plugin that fails to import when ``failed`` is None (given a list, such failures are appended
    to it as ``(index, spec, error)`` and the rest is built). An entry-point plugin that fails to
    import is recorded in ``broken`` instead, so everything else still works.
    """
    pm = pluggy.PluginManager("gankit")
    pm.add_hookspecs(hookspecs)
    if os.environ.get("GANKIT_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: print(msg, end="", file=sys.stderr))
        pm.enable_tracing()
    loader = _Loader(pm, disabled_names(disable))
    for mod_name in BUILTIN_PLUGINS:
        loader.add(importlib.import_module(mod_name), mod_name, mod_name)
    if load_entry_points if load_entry_points is not None else not autoload_disabled():
        loader.add_entry_points()
    for i, plugin in enumerate(extra):
        name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{i}"
        loader.add(plugin, name, name)
    for i, spec in enumerate(recipe_plugins):
        try:
            module = _load_module(spec, recipe_dir)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            if failed is None:
                raise PluginError(f"plugins[{i}]: cannot load plugin {spec!r}: {error}") from None
            failed.append((i, spec, error))
            continue
        loader.add(module, spec, f"recipe plugin {spec}")
    unknown = tuple(d for d in loader.disabled if d not in loader.matched)
    return Plugins(pm=pm, registry=_registry(pm, loader.sources), broken=loader.broken, sources=loader.sources,
                   disabled=loader.disabled, unknown_disabled=unknown)


class _Loader:
    """Registers plugins on ``pm`` (skipping disabled and already registered ones), validating
    each and remembering where it came from."""

    def __init__(self, pm: pluggy.PluginManager, disabled: tuple[str, ...]):
        self.pm, self.disabled = pm, disabled
        self.sources: dict[str, str] = {}
        self.broken: list[BrokenPlugin] = []
        self.matched: set[str] = set()

    def add(self, plugin: Any, name: str, source: str) -> None:
        hit = [d for d in self.disabled if _is_disabled(name, (d,))]
        if hit:
            self.matched.update(hit)
            return
        if self.pm.is_registered(plugin):
            return
        pm = self.pm
        try:
            pm.register(plugin, name=name)
        except pluggy.PluginValidationError as e:
            lines = str(e).splitlines()
            detail = "; ".join(lines[1:]) if len(lines) > 1 else str(e)
            raise PluginError(f"plugin {source}: {detail} (match the hook's signature in docs/hooks.md)") from None
        except ValueError as e:  # the same name or object registered twice
            raise PluginError(f"plugin {source}: {e} (each plugin may be registered once)") from None
        try:
            _validate(pm, plugin, source)
        except pluggy.PluginValidationError as e:
            pm.unregister(name=name)
            raise PluginError(f"plugin {source}: {e} (check the hook names in docs/hooks.md)") from None
        except PluginError:
            pm.unregister(name=name)
            raise
        self.sources[name] = source

    def add_entry_points(self) -> None:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_text = f"{dist.name} {dist.version}" if dist else "unknown distribution"
            where = f"{dist_text}, entry point {ENTRY_POINT_GROUP}: {ep.name} = {ep.value}"
            try:
                plugin = ep.load()
            except Exception as e:  # a broken third-party plugin must not take gankit down
                self.broken.append(BrokenPlugin(ep.name, where, f"{type(e).__name__}: {e}"))
                continue
            self.add(plugin, f"{ep.name} ({dist_text})", dist_text if dist else where)


def _registry(pm: pluggy.PluginManager, sources: dict[str, str]) -> Registry:
    """Call every registration hook and record which plugin registered each component."""
    registry = Registry()
    plugins = list(pm.get_plugins())
    order = {name: i for i, name in enumerate(sources)}
    plugins.sort(key=lambda p: order.get(pm.get_name(p), len(order)))
    for kind, hook_name in KINDS.items():
        # Each plugin's implementation is called through pluggy (tracing and hook wrappers apply)
        # on its own - a hook caller without the other plugins - so the registry knows who
        # registered what, and a duplicate names the later plugin last.
        for plugin in plugins:
            if hook_name not in {c.name for c in pm.get_hookcallers(plugin) or ()}:
                continue
            name = pm.get_name(plugin)
            source = sources.get(name, name)
            caller = pm.subset_hook_caller(hook_name, remove_plugins=[p for p in plugins if p is not plugin])

            def register(component_name: str, factory: type, _kind=kind, _source=source) -> None:
                registry.add(_kind, component_name, factory, _source)

            caller(register=register)
    return registry


def component_class(kind: str, name: str) -> type:
    """The class the installed plugins (built-ins and ``gankit`` entry points) register as
    ``(kind, name)``, e.g. ``component_class("metric", "swd")``: for tools that read a
    component's class attributes (a metric's ``higher_is_better``) without a recipe.

    Raises ``PluginError`` naming the kind, the name and the names available.
    """
    try:
        return build_plugins().registry.get(kind, name).factory
    except KeyError as e:
        raise PluginError(str(e.args[0])) from None
