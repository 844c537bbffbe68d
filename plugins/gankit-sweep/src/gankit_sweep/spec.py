"""What a study remembers of the command that started it, and how a later command is checked
against it.

A study records what the user wrote: the recipe file's merged TOML table (after ``extends``;
without ``--set`` and without the defaults gankit fills in, so a gankit update that adds an
option with a default does not make the same command a different study), the ``--param`` and
``--set`` items, the budget, the objective and the sampler. The same study with other settings
is refused with a message naming what differs in the command's own terms (``--budget-kimg 4
then, 8 now``; ``the recipe file recipes/pggan.toml changed since the study began: loss.name
"hinge" then, "bce" now``). ``--seeds``, ``--trials``, ``--jobs`` and the pruner may change.

Studies started by an older gankit recorded a digest of the recipe with every default filled in
and the budget as ``run.total_kimg`` / ``run.max_minutes`` ``--set`` items (``LEGACY``): their
budget is read back from those items, and a digest that no longer matches cannot tell a changed
recipe file from changed defaults, so it is a warning, not a refusal.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from gan_kit import GankitError

__all__ = ["VERSION", "study_spec", "check_spec", "upgrade_needed"]

#: The format of the record; a record without ``version`` is the older one (``LEGACY``).
VERSION = 2
ATTR = "gankit"
#: Budget options and the recipe keys they set.
BUDGET = {"budget_kimg": ("--budget-kimg", "run.total_kimg"), "budget_minutes": ("--budget-minutes", "run.max_minutes")}


def _json_safe(table: dict) -> dict:
    """``table`` as JSON data (TOML dates and times as text), for the study's attributes."""
    return json.loads(json.dumps(table, default=str))


def table_digest(table: dict) -> str:
    """sha256 (16 hex digits) of a recipe table as canonical JSON: equal tables, equal digests."""
    text = json.dumps(table, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def study_spec(*, recipe: Path, table: dict, params, overrides, budget_kimg: float | None,
               budget_minutes: float | None, metric: str, sampler: str) -> dict:
    """The record of a sweep command: ``table`` is the recipe file's merged table
    (``gan_kit.read_table``)."""
    table = _json_safe(table)
    return {"version": VERSION, "recipe": str(recipe), "recipe_digest": table_digest(table), "recipe_table": table,
            "params": list(params), "sets": list(overrides), "budget_kimg": budget_kimg,
            "budget_minutes": budget_minutes, "metric": metric, "sampler": sampler}


def _from_legacy(saved: dict) -> dict:
    """A legacy record in this format: its budget read back from its ``--set`` items (the sweep
    refused ``--set`` of those keys, so such an item came from the budget)."""
    out = {**saved, "budget_kimg": None, "budget_minutes": None}
    sets = []
    for item in saved.get("sets") or []:
        key, _, value = str(item).partition("=")
        budget = next((b for b, (_, k) in BUDGET.items() if k == key.strip()), None)
        if budget is None:
            sets.append(item)
            continue
        try:
            out[budget] = float(value)
        except ValueError:
            sets.append(item)
    out["sets"] = sets
    return out


def _items(items: list) -> str:
    return " ".join(f"'{x}'" for x in items) if items else "none"


def _number(x: float | None) -> str:
    return "none" if x is None else f"{x:g}"


def _flatten(table: dict, prefix: str = "") -> dict:
    """Dotted keys as ``--set`` takes them (arrays of tables by number: ``penalty.0.weight``)."""
    out: dict = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            out.update(_flatten({str(i): x for i, x in enumerate(v)}, key + "."))
        else:
            out[key] = v
    return out


def _table_changes(then: dict | None, now: dict, limit: int = 3) -> str:
    """``: loss.name "hinge" then, "bce" now; ...`` for up to ``limit`` keys ('' when unknown)."""
    if not isinstance(then, dict):
        return ""
    from gan_kit import toml_value

    a, b = _flatten(then), _flatten(now)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, ...) != b.get(k, ...))

    def show(d: dict, k: str) -> str:
        return toml_value(d[k]) if k in d else "unset"

    parts = [f"{k} {show(a, k)} then, {show(b, k)} now" for k in keys[:limit]]
    more = f"; {len(keys) - limit} more keys" if len(keys) > limit else ""
    return (": " + "; ".join(parts) + more) if parts else ""


def _differences(saved: dict, now: dict) -> list[str]:
    out = []
    if saved.get("params") != now["params"]:
        out.append(f"--param {_items(saved.get('params') or [])} then, {_items(now['params'])} now")
    if saved.get("sets") != now["sets"]:
        out.append(f"--set {_items(saved.get('sets') or [])} then, {_items(now['sets'])} now")
    for budget, (flag, _) in BUDGET.items():
        if saved.get(budget) != now[budget]:
            out.append(f"{flag} {_number(saved.get(budget))} then, {_number(now[budget])} now")
    if saved.get("metric") != now["metric"]:
        out.append(f"objective {saved.get('metric')} then, {now['metric']} now (--metric)")
    if saved.get("sampler") != now["sampler"]:
        out.append(f"--sampler {saved.get('sampler')} then, {now['sampler']} now")
    return out


def check_spec(name: str, saved: dict, now: dict, legacy_digest: Callable[[], str]) -> list[str]:
    """Raise ``GankitError`` (one line) when study ``name``, recorded as ``saved``, was started
    with other settings than ``now``; returns warnings (a legacy record's recipe digest that no
    longer matches). ``legacy_digest()``: the digest an older gankit recorded, computed now."""
    legacy = "version" not in saved
    then = _from_legacy(saved) if legacy else saved
    differ = _differences(then, now)
    warnings = []
    if not legacy and then.get("recipe_digest") != now["recipe_digest"]:
        differ.append(f"the recipe file {now['recipe']}, or a file it extends, changed since the study began"
                      f"{_table_changes(then.get('recipe_table'), now['recipe_table'])}")
    elif legacy and saved.get("recipe_digest") != legacy_digest():
        warnings.append(f"--study {name} was started by an older gankit, which recorded the recipe with gankit's "
                        f"defaults filled in; it differs now, because {now['recipe']} changed or because gankit's "
                        f"defaults did, which cannot be told apart: continuing as the same study (if the recipe "
                        f"file changed, start a new study with --study NEW_NAME)")
    if differ:
        raise GankitError(f"--study {name}: this study was started with other settings ({'; '.join(differ)}); "
                          f"continue it with the command that started it, or start a new study with --study NEW_NAME")
    return warnings


def upgrade_needed(saved: dict) -> bool:
    """Whether ``saved`` is a legacy record, to be replaced by this format once it was accepted."""
    return "version" not in saved
