"""Reading a recipe: TOML files (a UTF-8 byte-order mark is allowed), ``extends`` chains,
``--set KEY=VALUE`` overrides, recipe plugins; then ``gan_kit.recipe.validate`` builds the Recipe.

``extends = "base.toml"`` is relative to the recipe; tables merge key by key, arrays replace.
``--set`` VALUE is a TOML value; a bare word is taken as a string. Every problem found is
collected and raised as one ``RecipeError``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from gan_kit.base.errors import RecipeError
from gan_kit.recipe.problems import Problems, describe as _describe
from gan_kit.recipe.validate import build_recipe

__all__ = ["load_recipe", "parse_set", "read_table"]

_TOML_POS = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$", re.S)


def _parse_toml(text: str, label: str, problems: Problems) -> dict | None:
    # Windows Notepad saves "UTF-8" with a byte-order mark, which TOML itself does not allow.
    text = text.removeprefix("\ufeff")
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
        text = path.read_text(encoding="utf-8-sig")
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
    problems.dirs[label] = path.parent.absolute() if text is None else None
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


def read_table(path: str | Path) -> dict:
    """The merged TOML table of recipe file ``path`` after its ``extends`` chain: what the user
    wrote, without ``--set`` and without the defaults gankit fills in (``extends`` itself
    removed). Raises ``RecipeError`` when a file of the chain cannot be read or parsed."""
    path = Path(path)
    problems = Problems(str(path))
    raw = _load_with_extends(path, str(path), problems)
    if raw is None or problems:
        raise RecipeError(problems.lines)
    return raw


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


def _apply_set(raw: dict, keys: list, value: Any, item: str, problems: Problems) -> str | None:
    """Set ``raw[keys...] = value``; return the dotted key set, or None after adding a problem."""
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
                return None
        elif isinstance(node, dict):
            k = str(k)
            if not last and k not in node:
                # Only the top level holds arrays (of tables: penalty, metric, tracker); a number
                # deeper down keys a table, e.g. architecture.width_by_resolution.8 = 64.
                node[k] = [] if i == 0 and isinstance(keys[i + 1], int) else {}
                created.append(tuple(keys[:i + 1]))
        else:
            problems.add("", f"--set {item!r}: {here} is {_describe(node)}, not a table or array "
                             f"(set {here} itself)", label=label)
            return None
        if last:
            node[k] = value
        else:
            node = node[k]
    for prefix in (*created, tuple(keys)):  # the key and every table --set created on the way
        problems.origin[prefix] = f"{label} (--set)"
    return ".".join(map(str, keys))


def load_recipe(path: str | Path, overrides: list[str] = (), *, plugins: Any = None, extra_plugins=(),
                text: str | None = None):
    """Load, merge, override and validate a recipe.

    Returns ``(recipe, plugins)`` where ``plugins`` is the ``gan_kit.plugin_api.manager.Plugins`` built with
    the recipe's ``plugins = [...]`` (or the one passed in). ``text``: TOML to parse instead of
    reading ``path`` (which then only labels messages), e.g. the recipe saved in a checkpoint.
    Raises ``RecipeError`` listing every problem (a recipe plugin that cannot be imported is one
    of them), or ``PluginError`` for a plugin that breaks the rules (duplicate, misspelled hook).
    """
    from gan_kit.plugin_api.manager import build_plugins

    path = Path(path)
    problems = Problems(str(path))
    raw = _load_with_extends(path, str(path), problems, text=text)
    if raw is None:
        raise RecipeError(problems.lines)
    cli_keys: set[str] = set()
    for item in overrides:
        try:
            keys, value = parse_set(item)
        except ValueError as e:
            problems.add("", str(e))
            continue
        key = _apply_set(raw, keys, value, item, problems)
        if key is not None:
            cli_keys.add(key)
    if plugins is None:
        recipe_plugins = raw.get("plugins", [])
        if not isinstance(recipe_plugins, list):
            recipe_plugins = []
        failed: list[tuple[int, str, str]] = []
        disable = raw.get("disable_plugins", [])
        disable = [d for d in disable if isinstance(d, str)] if isinstance(disable, list) else []
        plugins = build_plugins(extra_plugins, recipe_plugins=[p if isinstance(p, str) else "" for p in recipe_plugins],
                                recipe_dir=path.parent, failed=failed, disable=disable)
        for i, spec, error in failed:
            problems.add(f"plugins[{i}]", f"cannot load plugin {spec!r}: {error} "
                                          f"(install it, or give a module name or a .py path relative to the recipe)",
                         label=problems.where("plugins"))
    recipe = build_recipe(raw, path, plugins.registry, problems, plugins.broken, cli_keys=frozenset(cli_keys))
    if problems or recipe is None:
        raise RecipeError(problems.lines)
    return recipe, plugins
