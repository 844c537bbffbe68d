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

from gan_kit.errors import RecipeError
from gan_kit.options import convert, describe_type, option, option_fields
from gan_kit.registry import Registry, suggest

__all__ = [
    "RunOptions",
    "OptimOptions",
    "EmaOptions",
    "ComponentSpec",
    "Recipe",
    "load_recipe",
    "parse_set",
    "parse_options",
    "recipe_to_dict",
    "recipe_to_toml",
    "Problems",
]


def _positive(v):
    if isinstance(v, float) and not math.isfinite(v):
        return f"must be finite, got {v!r} (use a positive number)"
    return None if v > 0 else f"must be > 0, got {v!r} (use a positive number)"


def _device(v):
    if re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", v):
        return None
    return f'unknown device {v!r} (use "auto", "cpu", "cuda" or "cuda:N")'


def _non_negative(v):
    return None if v >= 0 else f"must be >= 0, got {v!r} (use 0 or a positive number)"


def _power_of_two(v):
    if v >= 4 and not v & (v - 1):
        return None
    lower = max(4, 1 << max(2, v.bit_length() - 1))
    return f"must be a power of two >= 4, got {v} (try {lower} or {lower * 2})"


@attrs.frozen
class RunOptions:
    """The ``[run]`` table: length, place and precision of training."""

    seed: int = option(0, help="Seed of every random number generator (torch, numpy, python).")
    device: str = option("auto", help='"auto" (CUDA when present, else CPU), "cpu", "cuda" or "cuda:N".',
                         validator=_device)
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
    tf32: bool = option(True, help="Allow TF32 matmul/convolution on CUDA (Ampere and newer).")
    cudnn_benchmark: bool = option(True, help="Let cuDNN pick the fastest convolution algorithms (CUDA).")
    compile_backend: str = option("inductor", help='torch.compile backend ("inductor"; "aot_eager" traces '
                                                   "without generating code, for checks).")
    channels_last: bool = option(False, help="Use the channels_last memory format for images and weights.")
    grad_sync: Literal["ddp", "all-reduce"] = option(
        "ddp", help='Several processes: "ddp" = separate DistributedDataParallel wrappers for G and D '
                    '(bucketed all-reduce overlapping the backward); "all-reduce" = one flattened '
                    "all-reduce before each optimizer step, also for strategies that set .grad themselves.")
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
                          validator=lambda v: None if 0.0 <= v <= 1.0 else
                          f"must be in [0, 1], got {v!r} (0.999 is usual; 0 copies G every step)")
    half_life_kimg: float | None = option(
        None, help="If set, beta = 0.5 ** (batch / (half_life_kimg * 1000)) per step (StyleGAN2); overrides decay.")
    rampup: float | None = option(
        None, help="With half_life_kimg: half-life = min(half_life, cur_nimg * rampup) (StyleGAN2's 0.05).")


@attrs.frozen
class DataSlot:
    resolution: int = option(32, help="Final image side in pixels (a power of two, >= 4).",
                             validator=_power_of_two)


@attrs.frozen
class PenaltySlot:
    weight: float = option(1.0, help="Multiplier of this penalty in the D objective.", validator=_non_negative)


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

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _key_parts(key: str) -> tuple[str | int, ...]:
    """``"penalty[0].weight"`` -> ``("penalty", 0, "weight")``."""
    return tuple(int(m.group(2)) if m.group(2) is not None else m.group(1) for m in _PART.finditer(key))


class Problems:
    """Collects ``<file>: <dotted.key>: <what> (<fix>)`` lines.

    ``origin`` maps key paths to the file (or ``--set``) that gave them their value, so a problem
    in a value that came from an ``extends`` base names the base file.
    """

    def __init__(self, label: str):
        self.label = label
        self.lines: list[str] = []
        self.origin: dict[tuple, str] = {}

    def where(self, key: str) -> str:
        parts = _key_parts(key)
        for n in range(len(parts), 0, -1):
            if parts[:n] in self.origin:
                return self.origin[parts[:n]]
        return self.label

    def add(self, key: str, msg: str, label: str | None = None) -> None:
        label = label or self.where(key)
        line = f"{label}: {key}: {msg}" if key else f"{label}: {msg}"
        if line not in self.lines:
            self.lines.append(line)

    def mark(self, data: Any, label: str, prefix: tuple = ()) -> None:
        """Record ``label`` as the origin of every value in ``data`` (tables recurse)."""
        if prefix:
            self.origin[prefix] = label
        if isinstance(data, dict):
            for k, v in data.items():
                self.mark(v, label, (*prefix, k))

    def __bool__(self) -> bool:
        return bool(self.lines)

    def __len__(self) -> int:
        return len(self.lines)


_TOML_POS = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$", re.S)


def _parse_toml(text: str, label: str, problems: Problems) -> dict | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_POS.match(str(e))
        if m is None:
            problems.add("", f"invalid TOML: {e} (fix the syntax)", label=label)
            return None
        line, col = int(m["line"]), int(m["col"])
        lines = text.splitlines()
        src = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        shown = f": {src!r}" if src else ""
        problems.add("", f"line {line}, column {col}: invalid TOML: {m['msg']}{shown} "
                         f"(fix the syntax on line {line}; strings need quotes, tables [name], arrays [a, b])",
                     label=label)
        return None


def _read_toml(path: Path, label: str, problems: Problems) -> dict | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.add("", "file not found (check the path)", label=label)
        return None
    except IsADirectoryError:
        problems.add("", "is a folder, not a recipe file (give the path of a .toml file)", label=label)
        return None
    except UnicodeDecodeError as e:
        problems.add("", f"not UTF-8 text ({e.reason} at byte {e.start}); save the recipe as UTF-8", label=label)
        return None
    except OSError as e:
        problems.add("", f"cannot read: {e.strerror} (check the file's permissions)", label=label)
        return None
    return _parse_toml(text, label, problems)


def _merge(base: dict, top: dict) -> dict:
    """Tables merge key by key; every other value (arrays included) replaces."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _load_with_extends(path: Path, label: str, problems: Problems, chain: tuple[tuple[Path, str], ...] = (),
                       text: str | None = None) -> dict | None:
    """Read ``path`` (or parse ``text``) and, recursively, the file it ``extends``; mark origins."""
    data = _parse_toml(text, label, problems) if text is not None else _read_toml(path, label, problems)
    if data is None:
        return None
    chain = (*chain, (path.resolve(), label))
    parent = data.pop("extends", None)
    base = None
    if parent is not None:
        if not isinstance(parent, str) or not parent:
            problems.add("extends", f"expected a path string, got {_describe(parent)} "
                                    f'(write extends = "base.toml", relative to this file)', label=label)
        else:
            parent_path = path.parent / parent
            resolved = parent_path.resolve()
            seen = [p for p, _ in chain]
            if resolved in seen:
                names = [lbl for _, lbl in chain[seen.index(resolved):]] + [str(parent_path)]
                problems.add("extends", f"{parent!r} makes a cycle: {' -> '.join(names)} "
                                        f"(remove the extends from one of these files)", label=label)
            elif not parent_path.is_file():
                problems.add("extends", f"file {parent!r} not found: no {parent_path} "
                                        f"(the path is relative to the folder of {label})", label=label)
            else:
                base = _load_with_extends(parent_path, str(parent_path), problems, chain)
    problems.mark(data, label)
    return _merge(base, data) if base is not None else data


def _describe(value: Any) -> str:
    from gan_kit.options import _tname, toml_value

    return f"{_tname(value)} {toml_value(value)}"


_BARE = re.compile(r"^[A-Za-z0-9_.~/\-][A-Za-z0-9_.~/:\-]*$")
_SET_HELP = "write --set KEY=VALUE with a dotted KEY, e.g. --set run.total_kimg=2 or --set loss.name=bce"


def parse_set(item: str) -> tuple[list[str | int], Any]:
    """Parse one ``--set KEY=VALUE``: the dotted key (integers index arrays) and the TOML value.

    VALUE is parsed as TOML (``2``, ``0.5``, ``true``, ``[0.0, 0.99]``, ``{ 4 = 64 }``, ``"text"``);
    a bare word such as ``bce`` is taken as a string. Raises ``ValueError("--set 'item': what (fix)")``.
    """
    if "=" not in item:
        raise ValueError(f"--set {item!r}: no '=' ({_SET_HELP})")
    key, _, text = item.partition("=")
    key = key.strip()
    parts = key.split(".")
    if not key:
        raise ValueError(f"--set {item!r}: empty key before '=' ({_SET_HELP})")
    if any(not p or not re.fullmatch(r"[A-Za-z0-9_\-]+", p) for p in parts):
        raise ValueError(f"--set {item!r}: bad key {key!r}: use names joined by dots, array items by number "
                         f"(e.g. --set penalty.0.weight=5)")
    text = text.strip()
    if not text:
        raise ValueError(f"--set {item!r}: missing value after '=' (e.g. --set {key}=1; an empty string is --set {key}='\"\"')")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if _BARE.match(text):
            value = text
        else:
            raise ValueError(
                f"--set {item!r}: {text!r} is not a TOML value (numbers 2 or 0.5, true/false, arrays [0.0, 0.99], "
                f"tables {{ 4 = 64 }}; quote other strings: --set {key}='\"{text}\"')"
            ) from None
    return [int(p) if p.isdigit() else p for p in parts], value


def _apply_set(raw: dict, keys: list, value: Any, item: str, problems: Problems) -> None:
    label = problems.label
    node: Any = raw
    created: list[tuple] = []
    for i, k in enumerate(keys):
        here = ".".join(map(str, keys[:i])) or "the recipe"
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not isinstance(k, int) or not 0 <= k < len(node):
                what = f"index {k} is out of range" if isinstance(k, int) else f"{k!r} is not an index"
                problems.add("", f"--set {item!r}: {what}: {here} is an array of {len(node)} "
                                 f"(use an index 0..{len(node) - 1})", label=label)
                return
        elif isinstance(node, dict):
            k = str(k)
            if not last and k not in node:
                node[k] = [] if isinstance(keys[i + 1], int) else {}
                created.append(tuple(keys[:i + 1]))
        else:
            problems.add("", f"--set {item!r}: {here} is {_describe(node)}, not a table or array "
                             f"(set {here} itself)", label=label)
            return
        if last:
            node[k] = value
        else:
            node = node[k]
    for prefix in (*created, tuple(keys)):  # the key and every table --set created on the way
        problems.origin[prefix] = f"{label} (--set)"


# ---------------------------------------------------------------------------------- parsing --


def _type_fix(key: str, f: attrs.Attribute) -> str:
    from gan_kit.options import describe_type, field_default, toml_value

    default = field_default(f)
    if default is attrs.NOTHING or default is None:
        return f"write {describe_type(f.type)}"
    return f"e.g. {key.rsplit('.', 1)[-1]} = {toml_value(default)}"


def parse_options(cls: type, table: dict, label: Any, key: str, problems: Any,
                  extra_known: tuple[str, ...] = (), owner: str = "") -> Any:
    """Build ``cls`` (a frozen attrs Options class) from ``table``; add every problem found.

    ``problems`` is a ``Problems`` (or a list, for callers outside the loader; ``label`` then
    names the file). ``owner`` (e.g. ``loss 'hinge'``) is named in unknown-option messages.
    """
    if isinstance(problems, list):
        sink = Problems(str(label))
        out = parse_options(cls, table, label, key, sink, extra_known, owner)
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
            known = sorted(fields)
            hint = suggest(k, [*known, *extra_known])
            if hint:
                fix = hint.strip()
            elif known:
                fix = f"({owner or key} takes: {', '.join([*extra_known, *known])})"
            else:
                fix = f"({owner or key} takes no options" + (f" besides {', '.join(extra_known)})" if extra_known else ")")
            problems.add(dotted, f"unknown option {fix}")
            ok = False
            continue
        f = fields[k]
        try:
            value = convert(v, f.type)
        except ValueError as e:
            path = getattr(e, "path", ())
            where = dotted + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            fix = _type_fix(dotted, f) if not path else f"{k} is {describe_type(f.type)}"
            problems.add(where, f"{e} ({fix})")
            ok = False
            continue
        check = f.metadata.get("validator")
        msg = check(value) if check and value is not None else None
        if msg:
            help_text = f.metadata.get("help", "").rstrip(".")
            problems.add(dotted, msg if "(" in msg or not help_text else f"{msg} ({k}: {help_text})")
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


def _parse_component(registry: Registry, table_key: str, table: Any, key: str, problems: Problems,
                     broken: list = ()) -> ComponentSpec | None:
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
    if slot_cls is not None:
        slot = parse_options(slot_cls, {k: v for k, v in rest.items() if k in slot_names}, None, key, problems)
    opts = parse_options(comp.Options, rest, None, key, problems, extra_known=("name", *slot_names),
                         owner=f"{kind} {name!r}")
    if opts is None or (slot_cls is not None and slot is None):
        return None
    return ComponentSpec(kind=kind, name=name, options=opts, key=key, slot=slot)


def _build(raw: dict, path: Path, registry: Registry, problems: Problems, broken: list = ()) -> Recipe | None:
    for k, v in raw.items():
        if k not in TOP_LEVEL:
            what = "table" if isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict)) else "key"
            hint = suggest(k, TOP_LEVEL)
            problems.add(k, f"unknown top-level {what} " + (hint.strip() if hint else
                            f"(tables: {', '.join(t for t in TOP_LEVEL if t not in ('extends', 'plugins'))}; "
                            f"keys: extends, plugins)"))
    plugins = raw.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        problems.add("plugins", f"expected an array of module names or .py paths, got {_describe(plugins)} "
                                f'(e.g. plugins = ["my_package.gankit_plugin", "local_plugin.py"])')
        plugins = []
    core = {}
    for key, cls in CORE_TABLES.items():
        table = raw.get(key, {})
        if not isinstance(table, dict):
            problems.add(key, f"expected a table, got {_describe(table)} (write [{key}] and its keys below it)")
            core[key] = None
            continue
        core[key] = parse_options(cls, table, None, key, problems)
    comps: dict[str, Any] = {}
    for key, (kind, is_array, default, _) in COMPONENT_TABLES.items():
        if is_array:
            items = raw.get(key, [])
            if not isinstance(items, list):
                problems.add(key, f"expected an array of tables, got {_describe(items)} "
                                  f"(write [[{key}]], with two brackets, once per {kind})")
                comps[key] = None
                continue
            specs = [_parse_component(registry, key, t, f"{key}[{i}]", problems, broken) for i, t in enumerate(items)]
            comps[key] = tuple(specs) if all(s is not None for s in specs) else None
        else:
            table = raw.get(key, {})
            if isinstance(table, list):
                problems.add(key, f"expected one table, got an array of {len(table)} "
                                  f"(write [{key}] with one bracket: a recipe has one {kind})")
                comps[key] = None
                continue
            comps[key] = _parse_component(registry, key, table, key, problems, broken)
    if any(v is None for v in comps.values()):
        return None  # cross-option checks need every component
    # Cross-option checks run even when a core table had problems (its defaults stand in), so
    # every problem of the file is reported at once.
    stand_in = {k: v if v is not None else CORE_TABLES[k]() for k, v in core.items()}
    recipe = Recipe(
        path=path, plugins=tuple(plugins), run=stand_in["run"], optim=stand_in["optim"], ema=stand_in["ema"],
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
            absolute = key.split(".")[0].split("[")[0] in TOP_LEVEL
            full = key if absolute else (f"{spec.key}.{key}" if key else spec.key)
            if "(" not in msg:
                msg += f" (see gankit list-plugins --kind {spec.kind} -v)"
            problems.add(full, msg)
    return None if problems or any(v is None for v in core.values()) else recipe


def load_recipe(path: str | Path, overrides: list[str] = (), *, plugins: Any = None, extra_plugins=(),
                text: str | None = None):
    """Load, merge, override and validate a recipe.

    Returns ``(recipe, plugins)`` where ``plugins`` is the ``gan_kit.plugins.Plugins`` built with
    the recipe's ``plugins = [...]`` (or the one passed in). ``text``: TOML to parse instead of
    reading ``path`` (which then only labels messages), e.g. the recipe saved in a checkpoint.
    Raises ``RecipeError`` listing every problem (a recipe plugin that cannot be imported is one
    of them), or ``PluginError`` for a plugin that breaks the rules (duplicate, misspelled hook).
    """
    from gan_kit.plugins import build_plugins

    path = Path(path)
    problems = Problems(str(path))
    raw = _load_with_extends(path, str(path), problems, text=text)
    if raw is None:
        raise RecipeError(problems.lines)
    for item in overrides:
        try:
            keys, value = parse_set(item)
        except ValueError as e:
            problems.add("", str(e))
            continue
        _apply_set(raw, keys, value, item, problems)
    if plugins is None:
        recipe_plugins = raw.get("plugins", [])
        if not isinstance(recipe_plugins, list):
            recipe_plugins = []
        failed: list[tuple[int, str, str]] = []
        plugins = build_plugins(extra_plugins, recipe_plugins=[p if isinstance(p, str) else "" for p in recipe_plugins],
                                recipe_dir=path.parent, failed=failed)
        for i, spec, error in failed:
            problems.add(f"plugins[{i}]", f"cannot load plugin {spec!r}: {error} "
                                          f"(install it, or give a module name or a .py path relative to the recipe)",
                         label=problems.where("plugins"))
    recipe = _build(raw, path, plugins.registry, problems, plugins.broken)
    if problems or recipe is None:
        raise RecipeError(problems.lines)
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
    for key in ("architecture", "init", "loss"):
        out[key] = _spec_table(getattr(recipe, key))
    if recipe.penalties:
        out["penalty"] = [_spec_table(s) for s in recipe.penalties]
    for key in ("update", "growth"):
        out[key] = _spec_table(getattr(recipe, key))
    if recipe.metrics:
        out["metric"] = [_spec_table(s) for s in recipe.metrics]
    return out


def recipe_to_toml(recipe: Recipe, header: str = "") -> str:
    """The resolved recipe as TOML text (loadable again with the same result)."""
    from gan_kit.options import toml_key, toml_value

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
