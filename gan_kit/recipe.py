"""TOML recipe -> frozen attrs ``Recipe``.

Loading collects every problem of the file (syntax, unknown tables and keys, wrong types,
unknown component names, cross-option checks of each component) and raises one ``RecipeError``
listing them all, each as ``<file>: <dotted.key>: <what is wrong> (<fix>)``.

Recipe features: ``extends = "base.toml"`` (relative to the recipe; tables merge key by key,
arrays replace), ``plugins = ["module", "path/to/plugin.py"]``, and ``--set KEY=VALUE`` overrides
(VALUE is a TOML value; a bare word is taken as a string).
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import attrs
import tomli_w

from gan_kit.errors import GankitError, RecipeError
from gan_kit.options import convert, option, option_fields
from gan_kit.registry import Registry, suggest

__all__ = [
    "RunOptions",
    "OptimOptions",
    "EmaOptions",
    "ComponentSpec",
    "Recipe",
    "load_recipe",
    "parse_set",
    "recipe_to_toml",
]


def _positive(v):
    return None if v > 0 else f"must be > 0, got {v!r}"


def _non_negative(v):
    return None if v >= 0 else f"must be >= 0, got {v!r}"


@attrs.frozen
class RunOptions:
    """The ``[run]`` table: length, place and precision of training."""

    seed: int = option(0, help="Seed of every random number generator (torch, numpy, python).")
    device: str = option("auto", help='"auto" (CUDA when present, else CPU), "cpu", "cuda" or "cuda:N".')
    precision: Literal["auto", "fp32", "bf16", "fp16"] = option(
        "auto", help='"auto" = bf16 autocast on CUDA and fp32 on the CPU; "fp16" adds a GradScaler.')
    out_dir: str = option("runs/gankit", help="Run directory (relative to the working directory).")
    total_kimg: float = option(100.0, help="Length of training in thousands of real images shown.",
                               validator=_positive)
    tick_kimg: float = option(1.0, help="Reporting interval in kimg: metrics.jsonl line, progress, samples.",
                              validator=_positive)
    snapshot_ticks: int = option(10, help="Write the latest checkpoint every this many ticks (0 = only at "
                                          "phase ends and the end).", validator=_non_negative)
    sample_grid: int = option(64, help="Images in each sample grid from G_ema (a fixed latent batch).",
                              validator=_positive)
    on_nonfinite: Literal["stop", "skip"] = option(
        "stop", help='A NaN/inf loss: "stop" with a message (last checkpoint untouched) or "skip" the step.')
    max_skipped: int = option(100, help='With on_nonfinite = "skip": stop after this many skipped steps.',
                              validator=_non_negative)
    num_workers: int = option(0, help="Data-loader worker processes (0 = load in the main process).",
                              validator=_non_negative)
    compile: bool = option(False, help="torch.compile G and D (recompiles at most once per phase).")
    channels_last: bool = option(False, help="Use the channels_last memory format for images and weights.")
    progress: bool = option(True, help="Show the rich progress bar.")


@attrs.frozen
class OptimOptions:
    """The ``[optim]`` table: one optimizer each for G and D."""

    name: Literal["adam", "sgd"] = option("adam", help='"adam" (PGGAN: betas (0, 0.99)) or plain "sgd".')
    lr: float = option(0.001, help="Base learning rate of G and D (scaled per phase by the growth schedule).",
                       validator=_positive)
    betas: tuple[float, float] = option((0.0, 0.99), help="Adam's (beta1, beta2).")
    eps: float = option(1e-8, help="Adam's epsilon.", validator=_positive)
    g_lr: float | None = option(None, help="G's learning rate (TTUR); None = lr.")
    d_lr: float | None = option(None, help="D's learning rate (TTUR); None = lr.")


@attrs.frozen
class EmaOptions:
    """The ``[ema]`` table: the exponential moving average G_ema of G's weights."""

    decay: float = option(0.999, help="Per-step decay beta: G_ema = beta * G_ema + (1 - beta) * G.",
                          validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v!r}")
    half_life_kimg: float | None = option(
        None, help="If set, beta = 0.5 ** (batch / (half_life_kimg * 1000)) per step (StyleGAN2); overrides decay.")
    rampup: float | None = option(
        None, help="With half_life_kimg: half-life = min(half_life, cur_nimg * rampup) (StyleGAN2's 0.05).")


@attrs.frozen
class DataSlot:
    resolution: int = option(32, help="Final image side in pixels (a power of two, >= 4).")


@attrs.frozen
class PenaltySlot:
    weight: float = option(1.0, help="Multiplier of this penalty in the D objective.")


@attrs.frozen
class MetricSlot:
    every_kimg: float | None = option(None, help="Evaluate every this many kimg (None = at the end only).")


#: Component tables: recipe key -> (component kind, is an array of tables, default name, slot).
COMPONENT_TABLES: dict[str, tuple[str, bool, str | None, type | None]] = {
    "data": ("dataset", False, "digits", DataSlot),
    "architecture": ("architecture", False, "pggan", None),
    "init": ("init", False, "equalized-lr", None),
    "loss": ("loss", False, "hinge", None),
    "penalty": ("penalty", True, None, PenaltySlot),
    "update": ("update", False, "d-then-g", None),
    "growth": ("growth", False, "progressive", None),
    "metric": ("metric", True, None, MetricSlot),
}
CORE_TABLES = {"run": RunOptions, "optim": OptimOptions, "ema": EmaOptions}
TOP_LEVEL = ["extends", "plugins", *CORE_TABLES, *COMPONENT_TABLES]


@attrs.frozen
class ComponentSpec:
    """A component chosen in a recipe: its kind, name, parsed options and slot keys
    (``weight`` of a penalty, ``every_kimg`` of a metric, ``resolution`` of the data)."""

    kind: str
    name: str
    options: Any
    key: str
    slot: Any = None


@attrs.frozen
class Recipe:
    """A fully validated recipe. ``raw`` is the merged TOML table after ``extends`` and ``--set``."""

    path: Path
    plugins: tuple[str, ...]
    run: RunOptions
    optim: OptimOptions
    ema: EmaOptions
    data: ComponentSpec
    architecture: ComponentSpec
    init: ComponentSpec
    loss: ComponentSpec
    penalties: tuple[ComponentSpec, ...]
    update: ComponentSpec
    growth: ComponentSpec
    metrics: tuple[ComponentSpec, ...]
    raw: dict = attrs.field(eq=False, repr=False)

    @property
    def resolution(self) -> int:
        return self.data.slot.resolution


# ---------------------------------------------------------------------------------- reading --


def _read_toml(path: Path, label: str, problems: list[str]) -> dict | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.append(f"{label}: file not found (check the path)")
        return None
    except OSError as e:
        problems.append(f"{label}: cannot read: {e.strerror}")
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problems.append(f"{label}: TOML syntax error: {e}")
        return None


def _merge(base: dict, top: dict) -> dict:
    """Tables merge key by key; every other value (arrays included) replaces."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _load_with_extends(path: Path, label: str, problems: list[str], chain: tuple[Path, ...] = (),
                       text: str | None = None) -> dict | None:
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p.name) for p in (*chain, resolved))
        problems.append(f"{label}: extends: cycle {cycle} (remove one of the extends)")
        return None
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            problems.append(f"{label}: TOML syntax error: {e}")
            return None
    else:
        data = _read_toml(path, label, problems)
    if data is None:
        return None
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        problems.append(f"{label}: extends: expected a path string, got {parent!r}")
        return data
    parent_path = (path.parent / parent)
    if not parent_path.is_file():
        problems.append(f"{label}: extends: file {parent!r} not found (relative to {path.parent}/)")
        return data
    base = _load_with_extends(parent_path, str(parent_path), problems, (*chain, resolved))
    return _merge(base, data) if base is not None else data


_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def parse_set(item: str) -> tuple[list[str | int], Any]:
    """Parse one ``--set KEY=VALUE``: the dotted key (integers index arrays) and the TOML value.

    Raises ``ValueError`` with the fix on bad syntax.
    """
    if "=" not in item:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. --set run.total_kimg=2")
    key, _, text = item.partition("=")
    key = key.strip()
    parts = key.split(".")
    if not key or any(not p or not re.fullmatch(r"[A-Za-z0-9_\-]+", p) for p in parts):
        raise ValueError(f"--set {item!r}: bad key {key!r}; use a dotted key such as loss.name")
    text = text.strip()
    if not text:
        raise ValueError(f"--set {item!r}: missing value after '='")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if _BARE.match(text) and text not in ("true", "false"):
            value = text
        else:
            raise ValueError(
                f"--set {item!r}: {text!r} is not a TOML value (quote strings: --set {key}='\"...\"')"
            ) from None
    return [int(p) if p.isdigit() else p for p in parts], value


def _apply_set(raw: dict, keys: list, value: Any, item: str, problems: list[str]) -> None:
    node: Any = raw
    for i, k in enumerate(keys[:-1]):
        nxt = keys[i + 1]
        if isinstance(node, list):
            if not isinstance(k, int) or k >= len(node):
                problems.append(f"--set: {item}: index {k} is out of range for an array of {len(node)}")
                return
            node = node[k]
            continue
        if not isinstance(node, dict):
            problems.append(f"--set: {item}: {'.'.join(map(str, keys[:i]))} is not a table")
            return
        if k not in node:
            node[k] = [] if isinstance(nxt, int) else {}
        node = node[k]
    last = keys[-1]
    if isinstance(node, list):
        if isinstance(last, int) and last < len(node):
            node[last] = value
        else:
            problems.append(f"--set: {item}: index {last} is out of range for an array of {len(node)}")
    elif isinstance(node, dict):
        node[str(last)] = value
    else:
        problems.append(f"--set: {item}: cannot set a key inside a non-table value")


# ---------------------------------------------------------------------------------- parsing --


def parse_options(cls: type, table: dict, label: str, key: str, problems: list[str],
                  extra_known: tuple[str, ...] = ()) -> Any:
    """Build ``cls`` (a frozen attrs Options class) from ``table``; append problems."""
    fields = {f.name: f for f in option_fields(cls)}
    kwargs = {}
    ok = True
    for k, v in table.items():
        if k in extra_known:
            continue
        if k not in fields:
            known = sorted([*fields, *extra_known])
            hint = suggest(k, known) or (f"; known keys: {', '.join(known)}" if known else "; it takes no options")
            problems.append(f"{label}: {key}.{k}: unknown option{hint}")
            ok = False
            continue
        f = fields[k]
        try:
            value = convert(v, f.type)
        except ValueError as e:
            problems.append(f"{label}: {key}.{k}: {e}")
            ok = False
            continue
        check = f.metadata.get("validator")
        msg = check(value) if check and value is not None else None
        if msg:
            problems.append(f"{label}: {key}.{k}: {msg}")
            ok = False
            continue
        kwargs[k] = value
    for name, f in fields.items():
        if f.default is attrs.NOTHING and name not in kwargs and name not in table:
            problems.append(f"{label}: {key}.{name}: required option is missing ({f.metadata.get('help', '')})")
            ok = False
    if not ok:
        return None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        problems.append(f"{label}: {key}: {e}")
        return None


def _parse_component(registry: Registry, table_key: str, table: Any, label: str, key: str,
                     problems: list[str]) -> ComponentSpec | None:
    kind, _, default, slot_cls = COMPONENT_TABLES[table_key]
    if not isinstance(table, dict):
        problems.append(f"{label}: {key}: expected a table, got {table!r}")
        return None
    name = table.get("name", default)
    if name is None:
        problems.append(f"{label}: {key}.name: missing; choose one of: {', '.join(registry.names(kind))}")
        return None
    if not isinstance(name, str):
        problems.append(f"{label}: {key}.name: expected string, got {name!r}")
        return None
    try:
        comp = registry.get(kind, name)
    except KeyError as e:
        problems.append(f"{label}: {key}.name: {e.args[0]}")
        return None
    slot_names = tuple(f.name for f in option_fields(slot_cls)) if slot_cls else ()
    rest = {k: v for k, v in table.items() if k != "name"}
    slot = None
    if slot_cls is not None:
        slot = parse_options(slot_cls, {k: v for k, v in rest.items() if k in slot_names}, label, key, problems)
    opts = parse_options(comp.Options, rest, label, key, problems, extra_known=(*slot_names, "name"))
    if opts is None or (slot_cls is not None and slot is None):
        return None
    return ComponentSpec(kind=kind, name=name, options=opts, key=key, slot=slot)


def _build(raw: dict, label: str, path: Path, registry: Registry, problems: list[str]) -> Recipe | None:
    for k in raw:
        if k not in TOP_LEVEL:
            problems.append(f"{label}: {k}: unknown table{suggest(k, TOP_LEVEL)}; known: {', '.join(TOP_LEVEL)}")
    plugins = raw.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        problems.append(f"{label}: plugins: expected an array of module names or paths, got {plugins!r}")
        plugins = []
    core = {}
    for key, cls in CORE_TABLES.items():
        table = raw.get(key, {})
        if not isinstance(table, dict):
            problems.append(f"{label}: {key}: expected a table, got {table!r}")
            continue
        core[key] = parse_options(cls, table, label, key, problems)
    comps: dict[str, Any] = {}
    for key, (kind, is_array, default, _) in COMPONENT_TABLES.items():
        if is_array:
            items = raw.get(key, [])
            if not isinstance(items, list):
                problems.append(f"{label}: {key}: expected an array of tables ([[{key}]]), got {items!r}")
                comps[key] = None
                continue
            specs = [_parse_component(registry, key, t, label, f"{key}[{i}]", problems) for i, t in enumerate(items)]
            comps[key] = tuple(specs) if all(s is not None for s in specs) else None
        else:
            comps[key] = _parse_component(registry, key, raw.get(key, {}), label, key, problems)
    if problems:
        return None
    res = comps["data"].slot.resolution
    if res < 4 or res & (res - 1):
        problems.append(f"{label}: data.resolution: must be a power of two >= 4, got {res} (try {max(4, 1 << max(2, res.bit_length() - 1))})")
        return None
    recipe = Recipe(
        path=path, plugins=tuple(plugins), run=core["run"], optim=core["optim"], ema=core["ema"],
        data=comps["data"], architecture=comps["architecture"], init=comps["init"], loss=comps["loss"],
        penalties=comps["penalty"], update=comps["update"], growth=comps["growth"], metrics=comps["metric"],
        raw=raw,
    )
    # Cross-option checks owned by each component (e.g. growth vs data.resolution).
    for spec in (recipe.data, recipe.architecture, recipe.init, recipe.loss, *recipe.penalties,
                 recipe.update, recipe.growth, *recipe.metrics):
        comp = registry.get(spec.kind, spec.name)
        check = getattr(comp.factory, "problems", None)
        if check is None:
            continue
        for key, msg in check(spec.options, recipe) or ():
            absolute = key.split(".")[0] in TOP_LEVEL
            full = key if absolute else (f"{spec.key}.{key}" if key else spec.key)
            problems.append(f"{label}: {full}: {msg}")
    return None if problems else recipe


def load_recipe(path: str | Path, overrides: list[str] = (), *, plugins: Any = None, extra_plugins=(),
                text: str | None = None):
    """Load, merge, override and validate a recipe.

    Returns ``(recipe, plugins)`` where ``plugins`` is the ``gan_kit.plugins.Plugins`` built with
    the recipe's ``plugins = [...]`` (or the one passed in). ``text``: TOML to parse instead of
    reading ``path`` (which then only labels messages), e.g. the recipe saved in a checkpoint.
    Raises ``RecipeError`` listing every problem, or ``PluginError`` when a recipe plugin cannot
    be loaded.
    """
    from gan_kit.plugins import build_plugins

    path = Path(path)
    label = str(path)
    problems: list[str] = []
    raw = _load_with_extends(path, label, problems, text=text)
    if raw is None:
        raise RecipeError(problems)
    for item in overrides:
        try:
            keys, value = parse_set(item)
        except ValueError as e:
            problems.append(str(e))
            continue
        _apply_set(raw, keys, value, item, problems)
    if plugins is None:
        recipe_plugins = raw.get("plugins", [])
        if not isinstance(recipe_plugins, list):
            recipe_plugins = []
        plugins = build_plugins(extra_plugins, recipe_plugins=[p for p in recipe_plugins if isinstance(p, str)],
                                recipe_dir=path.parent)
    recipe = _build(raw, label, path, plugins.registry, problems)
    if problems or recipe is None:
        raise RecipeError(problems)
    return recipe, plugins


# ---------------------------------------------------------------------------------- writing --


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return value
    return value


def _spec_table(spec: ComponentSpec) -> dict:
    table = {"name": spec.name}
    if spec.slot is not None:
        table.update(attrs.asdict(spec.slot, recurse=False))
    table.update(attrs.asdict(spec.options, recurse=False))
    return _plain(table)


def recipe_to_dict(recipe: Recipe) -> dict:
    """The resolved recipe as plain TOML-able data, every default filled in."""
    out: dict[str, Any] = {}
    if recipe.plugins:
        out["plugins"] = list(recipe.plugins)
    for key in CORE_TABLES:
        out[key] = _plain(attrs.asdict(getattr(recipe, key), recurse=False))
    out["data"] = _spec_table(recipe.data)
    for key in ("architecture", "init", "loss", "update", "growth"):
        out[key] = _spec_table(getattr(recipe, key))
    if recipe.penalties:
        out["penalty"] = [_spec_table(s) for s in recipe.penalties]
    if recipe.metrics:
        out["metric"] = [_spec_table(s) for s in recipe.metrics]
    return out


def recipe_to_toml(recipe: Recipe, header: str = "") -> str:
    """The resolved recipe as TOML text (loadable again with the same result)."""
    text = tomli_w.dumps(recipe_to_dict(recipe))
    return (header + "\n" if header else "") + text
