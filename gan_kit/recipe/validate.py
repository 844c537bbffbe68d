"""Validating a merged recipe table and building the ``Recipe``: option types and ranges, component
names, and the cross-option checks each component declares (its ``problems(options, recipe)``);
then each component's ``resolved_options(options, recipe)``, so the ``Recipe`` holds what the
components build with (StyleGAN2's ``conv_clamp = "auto"`` as its bound).

Every problem is added to a ``Problems`` collector, so a recipe's problems are reported at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from gan_kit.base.options import (convert, describe_type, field_default, option_fields, option_range, range_problems,
                             toml_value)
from gan_kit.recipe.problems import Problems, describe as _describe
from gan_kit.recipe.schedules import BAD, ScheduleTables
from gan_kit.recipe.schema import COMPONENT_TABLES, CORE_TABLES, TOP_LEVEL, ComponentSpec, Recipe
from gan_kit.plugin_api.registry import Registry, suggest

__all__ = ["parse_options", "build_recipe"]


def _type_fix(key: str, f: attrs.Attribute) -> str:
    default = field_default(f)
    if default is attrs.NOTHING or default is None:
        return f"write {describe_type(f.type)}"
    return f"e.g. {key.rsplit('.', 1)[-1]} = {toml_value(default)}"


def _unknown_option_fix(k: str, known: list[str], extra_known: tuple[str, ...], owner: str) -> str:
    hint = suggest(k, [*known, *extra_known])
    if hint:
        return hint.strip()
    if known:
        return f"({owner} takes: {', '.join([*extra_known, *known])})"
    return f"({owner} takes no options" + (f" besides {', '.join(extra_known)})" if extra_known else ")")


def _range_fix(rng: Any, path: str, range_fix: str | None, msg: str) -> str:
    """The fix after a range problem at ``path`` (``""``, ``"[1]"``, ``".8"``): the option's hint
    (per array item when the hint is a tuple), else ``range_fix``, else one derived from the range."""
    hint = rng.hint
    if isinstance(hint, tuple):
        index = int(path[1:path.index("]")]) if path.startswith("[") else -1
        hint = hint[index] if 0 <= index < len(hint) else None
    return hint or range_fix or rng.default_fix(msg)


def _value_problems(f: attrs.Attribute, value: Any, dotted: str, range_fix: str | None) -> list[tuple[str, str]]:
    """Range problems of a converted value (every number in it), else the field validator's."""
    rng = option_range(f)
    found = range_problems(value, rng)
    if found:
        return [(dotted + path, f"{msg} ({_range_fix(rng, path, range_fix, msg)})") for path, msg in found]
    check = f.metadata.get("validator")
    msg = check(value) if check and value is not None else None
    if not msg:
        return []
    help_text = f.metadata.get("help", "").rstrip(".")
    name = dotted.rsplit(".", 1)[-1]
    return [(dotted, msg if "(" in msg or not help_text else f"{msg} ({name}: {help_text})")]


def parse_options(cls: type, table: dict, label: Any, key: str, problems: Any,
                  extra_known: tuple[str, ...] = (), owner: str = "", range_fix: str | None = None,
                  schedules: ScheduleTables | None = None, refuse_schedules: str | None = None) -> Any:
    """Build ``cls`` (a frozen attrs Options class) from ``table``; add every problem found.

    ``problems`` is a ``Problems`` (or a list, for callers outside the loader; ``label`` then
    names the file). ``owner`` (e.g. ``loss 'hinge'``) is named in unknown-option messages.
    Each value is converted to the declared type, then every number in it is range-checked
    (``gan_kit.base.options.option``'s ``min``/``max``, finite floats, int64 integers) and the field's
    validator runs. ``range_fix`` is the fix shown after a range problem of a field without its
    own ``hint``. ``schedules`` collects the schedule tables written in place of values
    (``gan_kit.recipe.schedules``); ``refuse_schedules`` says why this table takes none.
    """
    if isinstance(problems, list):
        sink = Problems(str(label))
        out = parse_options(cls, table, label, key, sink, extra_known, owner, range_fix, schedules, refuse_schedules)
        problems.extend(sink.lines)
        return out
    fields = {f.name: f for f in option_fields(cls)}
    kwargs = {}
    ok = True
    for k, v in table.items():
        if k in extra_known:
            continue
        dotted = f"{key}.{k}"
        if k not in fields:
            problems.add(dotted, f"unknown option {_unknown_option_fix(k, sorted(fields), extra_known, owner or key)}")
            ok = False
            continue
        f = fields[k]
        scheduled: frozenset[str] = frozenset()
        if schedules is not None:
            v, scheduled = schedules.take(v, f, dotted, refuse_schedules, owner or key)
            if v is BAD:
                ok = False
                continue
        try:
            value = convert(v, f.type)
        except ValueError as e:
            path = getattr(e, "path", ())
            where = dotted + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            fix = _type_fix(dotted, f) if not path else f"{k} is {describe_type(f.type)}"
            problems.add(where, f"{e} ({fix})")
            ok = False
            continue
        # a scheduled value is checked over the whole run instead (ScheduleTables.check)
        found = [p for p in _value_problems(f, value, dotted, range_fix) if p[0] not in scheduled]
        for where, msg in found:
            problems.add(where, msg)
        if found:
            ok = False
            continue
        kwargs[k] = value
    for name, f in fields.items():
        if f.default is attrs.NOTHING and name not in kwargs and name not in table:
            example = '"..."' if f.type is str else f"<{describe_type(f.type)}>"
            help_text = f.metadata.get("help", "see gankit list-plugins -v").rstrip(".")
            problems.add(f"{key}.{name}", f"missing: {owner or key} needs it (add {name} = {example}; {help_text})")
            ok = False
    if not ok:
        return None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        problems.add(key, f"{e} (see gankit list-plugins -v)")
        return None


#: Component tables whose component is used only while the run is built: no schedule there.
_BUILT_ONCE = {"data": "the data set is built once", "init": "the initializer runs once, when the networks are built",
               "growth": "the growth schedule is itself a function of images shown",
               "metric": "metrics are not part of training"}


def _parse_component(registry: Registry, table_key: str, table: Any, key: str, problems: Problems,
                     broken: list = (), schedules: ScheduleTables | None = None) -> ComponentSpec | None:
    kind, is_array, default, slot_cls = COMPONENT_TABLES[table_key]
    if not isinstance(table, dict):
        problems.add(key, f"expected a table, got {_describe(table)} "
                          f"(write [{key}] with name = \"...\" and its options)")
        return None
    names = registry.names(kind)
    name = table.get("name", default)
    if name is None:
        problems.add(f"{key}.name", f"missing (choose one of: {', '.join(names)})")
        return None
    if not isinstance(name, str):
        problems.add(f"{key}.name", f"expected string, got {_describe(name)} (choose one of: {', '.join(names)})")
        return None
    if (kind, name) not in registry:
        note = "".join(f" (plugin {b.name} ({b.source}) failed to load and may provide it: {b.error})"
                       for b in broken)
        problems.add(f"{key}.name", f"unknown {kind} {name!r}{suggest(name, names)}; "
                                    f"available: {', '.join(names)}{note}")
        return None
    comp = registry.get(kind, name)
    slot_names = tuple(f.name for f in option_fields(slot_cls)) if slot_cls else ()
    rest = {k: v for k, v in table.items() if k != "name"}
    slot = None
    refuse = _BUILT_ONCE.get(table_key)
    if slot_cls is not None:
        slot = parse_options(slot_cls, {k: v for k, v in rest.items() if k in slot_names}, None, key, problems,
                             owner=f"{kind} {name!r}", schedules=schedules, refuse_schedules=refuse)
    opts = parse_options(comp.Options, rest, None, key, problems, extra_known=("name", *slot_names),
                         owner=f"{kind} {name!r}", range_fix=f"see gankit list-plugins --kind {kind} -v",
                         schedules=schedules, refuse_schedules=refuse)
    if opts is None or (slot_cls is not None and slot is None):
        return None
    return ComponentSpec(kind=kind, name=name, options=opts, key=key, slot=slot)


def _check_disable(raw: dict, problems: Problems) -> tuple[str, ...]:
    value = raw.get("disable_plugins", [])
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        problems.add("disable_plugins", f"expected an array of plugin names, got {_describe(value)} "
                                        f'(names as `gankit plugins` lists them, e.g. disable_plugins = ["tensorboard"])')
        return ()
    return tuple(value)


def _check_top_level(raw: dict, problems: Problems) -> tuple[str, ...]:
    """Unknown top-level keys and the ``plugins`` array; returns the plugin specs."""
    for k, v in raw.items():
        if k not in TOP_LEVEL:
            what = "table" if isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict)) else "key"
            hint = suggest(k, TOP_LEVEL)
            problems.add(k, f"unknown top-level {what} " + (hint.strip() if hint else
                            f"(tables: {', '.join(t for t in TOP_LEVEL if t not in ('extends', 'plugins', 'disable_plugins'))}; "
                            f"keys: extends, plugins, disable_plugins)"))
    plugins = raw.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        problems.add("plugins", f"expected an array of module names or .py paths, got {_describe(plugins)} "
                                f'(e.g. plugins = ["my_package.gankit_plugin", "local_plugin.py"])')
        return ()
    return tuple(plugins)


def _parse_core(raw: dict, problems: Problems, schedules: ScheduleTables) -> dict[str, Any]:
    """``[run]``, ``[optim]``, ``[ema]`` parsed; None for a table with problems."""
    core: dict[str, Any] = {}
    for key, cls in CORE_TABLES.items():
        table = raw.get(key, {})
        if not isinstance(table, dict):
            problems.add(key, f"expected a table, got {_describe(table)} (write [{key}] and its keys below it)")
            core[key] = None
            continue
        core[key] = parse_options(cls, table, None, key, problems, schedules=schedules,
                                  refuse_schedules="the [run] table is fixed for the run" if key == "run" else None)
        if key == "run" and core[key] is not None:
            schedules.total_nimg = int(round(core[key].total_kimg * 1000))  # a schedule's "kimg" default
    return core


def _parse_components(raw: dict, registry: Registry, problems: Problems, broken: list,
                      schedules: ScheduleTables) -> dict[str, Any]:
    """Every component table parsed (a tuple of specs for array tables); None where a problem was found."""
    comps: dict[str, Any] = {}
    for key, (kind, is_array, _default, _) in COMPONENT_TABLES.items():
        if is_array:
            items = raw.get(key, [])
            if not isinstance(items, list):
                problems.add(key, f"expected an array of tables, got {_describe(items)} "
                                  f"(write [[{key}]], with two brackets, once per {kind})")
                comps[key] = None
                continue
            specs = [_parse_component(registry, key, t, f"{key}[{i}]", problems, broken, schedules)
                     for i, t in enumerate(items)]
            comps[key] = tuple(specs) if all(s is not None for s in specs) else None
        else:
            table = raw.get(key, {})
            if isinstance(table, list):
                problems.add(key, f"expected one table, got an array of {len(table)} "
                                  f"(write [{key}] with one bracket: a recipe has one {kind})")
                comps[key] = None
                continue
            comps[key] = _parse_component(registry, key, table, key, problems, broken, schedules)
    return comps


def _core_checks(recipe: Recipe, registry: Registry, problems: Problems) -> None:
    """Checks across core slots and components."""
    backend = recipe.run.compile_backend
    if recipe.run.compile or backend != "inductor":
        from torch._dynamo import list_backends  # only here: importing dynamo takes a moment

        if backend not in list_backends(exclude_tags=()):  # debugging backends are accepted, not offered
            problems.add("run.compile_backend",
                         f"{backend!r} is not a torch.compile backend (use one of "
                         f"{', '.join(map(repr, list_backends()))})")
    sn = recipe.architecture.slot.spectral_norm
    arch = registry.get("architecture", recipe.architecture.name).factory
    if sn != "none" and not getattr(arch, "supports_spectral_norm", True):
        # Said first and alone: the init advice below would send the user to an initializer this
        # architecture refuses, and back.
        problems.add("architecture.spectral_norm",
                     f"{sn!r}, but architecture {recipe.architecture.name!r} has no spectral-norm form: "
                     f"{getattr(arch, 'spectral_norm_reason', _SN_REASON)}; set "
                     f"spectral_norm = \"none\", or use pggan or dcgan for spectral normalisation")
    elif sn != "none" and recipe.init.name == "equalized-lr" and not getattr(arch, "owns_init", False):
        problems.add("architecture.spectral_norm",
                     f"{sn!r} with init 'equalized-lr' is meaningless: spectral normalisation divides each weight by its "
                     f"largest singular value, which cancels equalized lr's runtime scale (use init.name = \"normal\" or "
                     f"\"orthogonal\", or spectral_norm = \"none\")")


_SN_REASON = "its layers are not torch conv / linear layers (they apply the equalized learning rate themselves)"


def _cross_checks(recipe: Recipe, registry: Registry, problems: Problems) -> None:
    """Cross-option checks owned by each component (e.g. growth vs data.resolution)."""
    arch = registry.get("architecture", recipe.architecture.name).factory
    if recipe.architecture.slot.conditional and not getattr(arch, "supports_conditional", False):
        able = [n for n in registry.names("architecture")
                if getattr(registry.get("architecture", n).factory, "supports_conditional", False)]
        problems.add("architecture.conditional",
                     f"true, but architecture {recipe.architecture.name!r} has no class-conditional form "
                     f"(use {' or '.join(able) or 'another'}, or set conditional = false)")
    for spec in (recipe.data, recipe.architecture, recipe.init, recipe.loss, *recipe.penalties,
                 recipe.update, recipe.growth, *recipe.metrics, recipe.augment, *recipe.trackers):
        comp = registry.get(spec.kind, spec.name)
        check = getattr(comp.factory, "problems", None)
        if check is None:
            continue
        for key, msg in check(spec.options, recipe) or ():
            absolute = key.split(".")[0].split("[")[0] in TOP_LEVEL
            full = key if absolute else (f"{spec.key}.{key}" if key else spec.key)
            if "(" not in msg:
                msg += f" (see gankit list-plugins --kind {spec.kind} -v)"
            problems.add(full, msg)


def _absolute_plugin(spec: str, path: Path) -> str:
    """A ``.py`` plugin path made absolute (it is relative to the recipe's folder), so the
    resolved recipe a run saves - in its folder and its checkpoints - still finds the file."""
    if (spec.endswith(".py") or "/" in spec) and not Path(spec).expanduser().is_absolute():
        return str((path.parent / spec).resolve())
    return spec


def _resolve_paths(spec: ComponentSpec | None, problems: Problems, cli_keys: frozenset[str],
                   written: dict) -> ComponentSpec | None:
    """``spec`` with every relative path option (``option(path=True)``) made absolute: against
    the working directory when typed with ``--set``, else against the folder of the recipe file
    that set it (``Problems.dirs``; the working directory for a recipe without a file). The
    values as written go into ``written`` (dotted key -> value)."""
    if spec is None:
        return None
    import os

    changed = {}
    for f in option_fields(type(spec.options)):
        value = getattr(spec.options, f.name)
        if not f.metadata.get("path") or not isinstance(value, str) or not value:
            continue
        if value.startswith("~") or Path(value).is_absolute():
            continue
        dotted = f"{spec.key}.{f.name}"
        parts = dotted.replace("[", ".").replace("]", "").split(".")
        typed = any(".".join(parts[:n]) in cli_keys for n in range(1, len(parts) + 1))
        base = None if typed else problems.dirs.get(problems.where(dotted))
        changed[f.name] = os.path.normpath(os.path.join(base or os.getcwd(), value))
        written[dotted] = value
    return attrs.evolve(spec, options=attrs.evolve(spec.options, **changed)) if changed else spec


def build_recipe(raw: dict, path: Path, registry: Registry, problems: Problems, broken: list = (),
                 cli_keys: frozenset[str] = frozenset()) -> Recipe | None:
    """The validated ``Recipe`` of the merged table ``raw``, or None when ``problems`` holds any."""
    plugins = _check_top_level(raw, problems)
    schedules = ScheduleTables(registry, problems, parse_options)
    core = _parse_core(raw, problems, schedules)
    comps = _parse_components(raw, registry, problems, broken, schedules)
    if any(v is None for v in comps.values()):
        return None  # cross-option checks need every component
    written: dict[str, str] = {}
    comps = {k: tuple(_resolve_paths(s, problems, cli_keys, written) for s in v) if isinstance(v, tuple)
             else _resolve_paths(v, problems, cli_keys, written) for k, v in comps.items()}
    # Cross-option checks run even when a core table had problems (its defaults stand in), so
    # every problem of the file is reported at once.
    stand_in = {k: v if v is not None else CORE_TABLES[k]() for k, v in core.items()}
    recipe = Recipe(
        path=path, plugins=tuple(_absolute_plugin(p, path) for p in plugins), run=stand_in["run"], optim=stand_in["optim"], ema=stand_in["ema"],
        data=comps["data"], architecture=comps["architecture"], init=comps["init"], loss=comps["loss"],
        penalties=comps["penalty"], update=comps["update"], growth=comps["growth"], metrics=comps["metric"],
        augment=comps["augment"], trackers=comps["tracker"], raw=raw, cli_keys=cli_keys, disable_plugins=_check_disable(raw, problems),
        written_paths=written, schedules=tuple(schedules.specs),
    )
    schedules.check(int(round(recipe.run.total_kimg * 1000)))
    _cross_checks(recipe, registry, problems)
    _core_checks(recipe, registry, problems)
    return None if problems or any(v is None for v in core.values()) else _resolved(recipe, registry)


def _resolved(recipe: Recipe, registry: Registry) -> Recipe:
    """``recipe`` with every component's options as the component resolves them
    (``resolved_options``: ``"auto"`` and None values that stand for what the rest of the
    recipe decides), so the recipe a run saves holds what it builds, as it holds paths made
    absolute."""
    def resolve(spec: ComponentSpec) -> ComponentSpec:
        comp = registry.get(spec.kind, spec.name)
        method = getattr(comp.factory, "resolved_options", None)
        if method is None:  # a duck-typed component without ComponentBase
            return spec
        options = method(spec.options, recipe)
        return spec if options == spec.options else attrs.evolve(spec, options=options)

    single = {key: resolve(getattr(recipe, key)) for key in ("data", "architecture", "init", "loss", "update",
                                                              "growth", "augment")}
    arrays = {key: tuple(resolve(s) for s in getattr(recipe, key)) for key in ("penalties", "metrics", "trackers")}
    return attrs.evolve(recipe, **single, **arrays)
