"""``--param KEY=SPACE``: the search space of ``gankit sweep``, parsed, checked against the recipe
before anything trains, and turned into Optuna distributions and ``--set`` items for a trial.

SPACE is one of:

- a list ``[a, b, c]`` of values of the recipe key KEY (dotted, array items by number, exactly
  as ``--set`` takes it): each item is a TOML value, a bare word is a string
  (``update.name=[d-then-g,shared-fake]``, ``penalty.0.weight=[1, 10]``, ``penalty=[[], [{name="r1"}]]``);
- named bundles ``{name = {key = value, ...}, ...}``: KEY is then a label of your choosing and
  each choice sets several recipe keys together (``objective={hinge-gp = {loss.name = "hinge"},
  wgan-gp = {loss.name = "wgan-gp", penalty = []}}``); tables merge into the recipe's, arrays replace;
- a float range ``uniform(lo, hi)`` / ``loguniform(lo, hi)`` (``uniform(lo, hi, step)``) or an
  integer range ``int(lo, hi)`` / ``logint(lo, hi)`` (``int(lo, hi, step)``), both ends included.

Every problem is one line naming the ``--param`` item (``SpaceError``, exit code 2).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

from gan_kit import GankitError, RecipeError

__all__ = ["Space", "SpaceError", "parse_space", "parse_spaces", "check_spaces", "OWNED_KEYS", "set_item",
           "configurations", "config_key", "config_label"]

_KEY = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
_LABEL = re.compile(r"[A-Za-z0-9_\-]+")
_RANGE = re.compile(r"(?P<fn>uniform|loguniform|int|logint)\s*\((?P<args>.*)\)", re.S)
_SPACE_HELP = ("give a list [a, b], named bundles {name = {key = value}}, uniform(lo, hi), loguniform(lo, hi), "
               "int(lo, hi) or logint(lo, hi); one fixed value is --set KEY=VALUE")

#: Keys the sweep sets itself for every trial, with what to use instead.
OWNED_KEYS = {
    "run.seed": "every configuration runs with each seed of --seeds N (seeds 0 .. N-1)",
    "run.out_dir": "each trial's run directory is <study folder>/<trial> (choose the study folder with --out)",
    "extends": "a trial cannot change the recipe it extends (sweep that recipe instead)",
    "plugins": "a trial cannot load other plugins (list them in the recipe)",
    "disable_plugins": "a trial cannot switch plugins off (do it in the recipe)",
}


class SpaceError(GankitError):
    """A ``--param`` that cannot be swept: one line per problem."""


@attrs.frozen
class Space:
    """One ``--param``: ``kind`` is ``"choice"`` (a list of values of recipe key ``key``),
    ``"bundle"`` (``key`` is a label, ``choices`` the bundle names, ``bundles`` their keys and
    values), ``"float"`` or ``"int"`` (``low``..``high``, both included; ``log`` spacing; ``step``)."""

    key: str
    text: str
    kind: str
    values: tuple = ()
    bundles: dict = attrs.field(factory=dict)
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None

    @property
    def choices(self) -> list:
        """The Optuna choices of a list or bundle: numbers, booleans and strings as they are, any
        other value (an array, a table) as its TOML text (Optuna stores only scalars)."""
        if self.kind == "bundle":
            return list(self.bundles)
        return [v if isinstance(v, (str, int, float, bool)) else _toml(v) for v in self.values]

    def distribution(self):
        """The Optuna distribution of this space."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind in ("choice", "bundle"):
            return CategoricalDistribution(self.choices)
        if self.kind == "float":
            return FloatDistribution(self.low, self.high, log=self.log, step=self.step)
        return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))

    def suggest(self, trial) -> Any:
        """The value of this space in Optuna ``trial`` (sampled, or fixed by an enqueued trial)."""
        if self.kind in ("choice", "bundle"):
            return trial.suggest_categorical(self.key, self.choices)
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))

    def grid(self) -> list:
        """Every value of the space, for the grid sampler (SpaceError for a float range)."""
        if self.kind in ("choice", "bundle"):
            return self.choices
        if self.kind == "int":
            step = int(self.step or 1)
            if self.log:
                raise SpaceError(f"--param {self.text!r}: the grid sampler takes lists and int(lo, hi) ranges, not "
                                 f"logint (write the values as a list, or use --sampler random / tpe)")
            return list(range(int(self.low), int(self.high) + 1, step))
        raise SpaceError(f"--param {self.text!r}: the grid sampler takes lists and int(lo, hi) ranges, not a float "
                         f"range (write the values as a list, e.g. [0.0003, 0.001, 0.003], or use --sampler "
                         f"random / tpe)")

    def probes(self) -> list:
        """The values checked against the recipe before training: every choice, a range's ends."""
        if self.kind in ("choice", "bundle"):
            return self.choices
        ends = [self.low, self.high]
        return [int(v) for v in ends] if self.kind == "int" else ends

    def sets(self, value: Any) -> list[str]:
        """The ``--set KEY=VALUE`` items of this space's Optuna ``value``."""
        if self.kind == "bundle":
            return [set_item(k, v) for k, v in _leaves(self.bundles[value])]
        if self.kind == "choice":
            value = self.values[self.choices.index(value)]
        return [set_item(self.key, value)]

    def keys(self) -> set[str]:
        """The recipe keys this space sets."""
        if self.kind != "bundle":
            return {self.key}
        return {k for b in self.bundles.values() for k, _ in _leaves(b)}


def _toml(value: Any) -> str:
    from gan_kit import toml_value

    return toml_value(value)


def set_item(key: str, value: Any) -> str:
    """``--set`` text of ``key = value`` (the value as TOML)."""
    return f"{key}={_toml(value)}"


def _leaves(table: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """A bundle's dotted keys and values: tables recurse (they merge), anything else is a leaf."""
    out = []
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out += _leaves(v, key + ".")
        else:
            out.append((key, v))
    return out


def _split_items(text: str) -> list[str]:
    """The top-level comma-separated items of ``text`` (brackets, braces, parentheses and quotes
    nest)."""
    items, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    last = "".join(cur).strip()
    if last or items:
        items.append(last)
    return items


def _number(text: str, item: str, fn: str) -> float:
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpaceError(f"--param {item!r}: {fn}(...) takes finite numbers, got {text.strip()!r} "
                         f"(e.g. {fn}(1e-4, 3e-3))")
    return value


def _parse_range(key: str, item: str, fn: str, args: str) -> Space:
    parts = _split_items(args)
    if len(parts) not in (2, 3):
        raise SpaceError(f"--param {item!r}: {fn}(lo, hi) takes two numbers (and an optional step for uniform/int), "
                         f"got {len(parts)}")
    nums = [_number(p, item, fn) for p in parts]
    lo, hi = nums[0], nums[1]
    step = nums[2] if len(nums) == 3 else None
    log = fn.startswith("log")
    is_int = fn in ("int", "logint")
    if is_int and any(not float(n).is_integer() for n in nums):
        raise SpaceError(f"--param {item!r}: {fn}(...) takes integers, got {', '.join(p.strip() for p in parts)} "
                         f"(use uniform/loguniform for a float range)")
    if lo > hi:
        raise SpaceError(f"--param {item!r}: reversed range: low {lo:g} > high {hi:g} (write {fn}({hi:g}, {lo:g}))")
    if lo == hi:
        raise SpaceError(f"--param {item!r}: an empty range: low = high = {lo:g} (one value is --set {key}={lo:g})")
    if log and lo <= 0:
        raise SpaceError(f"--param {item!r}: {fn} needs low > 0, got {lo:g} (a log scale has no 0; use "
                         f"{fn[3:]}({lo:g}, {hi:g}) for a linear range)")
    if step is not None and (log or step <= 0):
        raise SpaceError(f"--param {item!r}: a step needs a linear range and step > 0 (got {fn} with step {step:g})")
    if is_int:
        return Space(key, item, "int", low=int(lo), high=int(hi), log=log, step=int(step) if step else None)
    return Space(key, item, "float", low=float(lo), high=float(hi), log=log, step=step)


def _parse_list(key: str, item: str, text: str) -> Space:
    from gan_kit import parse_set

    try:
        values = tomllib.loads(f"v = {_one_line(text)}")["v"]
    except tomllib.TOMLDecodeError:
        values = []
        for part in _split_items(text[1:-1]):
            if not part:
                raise SpaceError(f"--param {item!r}: an empty item in the list (separate values by single commas)") from None
            try:
                values.append(parse_set(f"{key}={part}")[1])
            except ValueError as e:
                raise SpaceError(f"--param {item!r}: item {part!r}: {str(e).split(': ', 1)[-1]}") from None
    if not values:
        raise SpaceError(f"--param {item!r}: an empty list (give at least one value, e.g. {key}=[a, b])")
    texts = [_toml(v) for v in values]
    twice = next((t for i, t in enumerate(texts) if t in texts[:i]), None)
    if twice is not None:
        raise SpaceError(f"--param {item!r}: {twice} is listed twice (give each value once)")
    return Space(key, item, "choice", values=tuple(values))


def _one_line(text: str) -> str:
    """TOML's inline tables and arrays take no line break, but a long space is easier to read (and to
    paste from the docs) over several lines of a quoted shell argument: line breaks read as spaces."""
    return " ".join(text.splitlines())


def _parse_bundles(key: str, item: str, text: str) -> Space:
    try:
        bundles = tomllib.loads(f"v = {_one_line(text)}")["v"]
    except tomllib.TOMLDecodeError as e:
        raise SpaceError(f"--param {item!r}: named bundles are a TOML inline table "
                         f"{{name = {{key = value, ...}}, ...}}: {e}") from None
    if not _LABEL.fullmatch(key):
        raise SpaceError(f"--param {item!r}: with named bundles KEY is a label (letters, digits, - and _), not the "
                         f"recipe key {key!r}; the keys go inside each bundle")
    if not bundles:
        raise SpaceError(f"--param {item!r}: no bundles (give at least one: {key}={{name = {{key = value}}}})")
    for name, table in bundles.items():
        numeric = next((k for k in table if k.isdigit()), None) if isinstance(table, dict) else None
        if numeric is not None:
            # TOML splits a bare key at its dots: lr-x0.5 = {...} is the table lr-x0 holding 5 = {...}.
            raise SpaceError(f"--param {item!r}: bundle name {name}.{numeric}... has a dot, which TOML reads as a "
                             f"nested table; name it without dots (e.g. {name}_{numeric})")
        if not isinstance(table, dict) or not table:
            raise SpaceError(f"--param {item!r}: bundle {name!r} must be a non-empty table of recipe keys, e.g. "
                             f"{name} = {{loss.name = \"hinge\"}}")
    return Space(key, item, "bundle", bundles=bundles)


_OPENERS = {"[": ("]", "an unclosed list", "KEY=[a, b]"),
            "{": ("}", "unclosed named bundles", "KEY={name = {key = value}, ...}"),
            "(": (")", "an unclosed range", "KEY=uniform(lo, hi)")}


def _forms(key: str) -> str:
    return f"write --param '{key}=[a, b]', '{key}=[\"a b\", c]' or '{key}=uniform(lo, hi)'"


def _unclosed(text: str, key: str) -> str | None:
    """What is wrong when a bracket, brace, parenthesis or quote of ``text`` is not closed (or
    closed without being opened), with the expected form; None when they pair up."""
    stack, quote = [], ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in _OPENERS:
            stack.append(ch)
        elif ch in "]})":
            if not stack or _OPENERS[stack[-1]][0] != ch:
                return f"a syntax error: {ch!r} closes nothing that was opened in {text!r} ({_forms(key)})"
            stack.pop()
    if quote:
        return f"a syntax error: the quote {quote} in {text!r} is not closed ({_forms(key)})"
    if stack:
        closer, what, form = _OPENERS[stack[-1]]
        return f"{what}: {text!r} has no closing {closer!r} (write --param '{form.replace('KEY', key)}')"
    return None


def parse_space(item: str) -> Space:
    """One ``--param KEY=SPACE`` item -> ``Space``; ``SpaceError`` (one line) when it is malformed."""
    if "=" not in item:
        raise SpaceError(f"--param {item!r}: no '=' (write --param KEY=SPACE, e.g. --param loss.name=[hinge,bce])")
    key, _, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not _KEY.fullmatch(key):
        raise SpaceError(f"--param {item!r}: bad key {key!r} (a dotted recipe key as --set takes it, e.g. "
                         f"optim.lr or penalty.0.weight)")
    if key in OWNED_KEYS:
        raise SpaceError(f"--param {item!r}: {key} is set by the sweep: {OWNED_KEYS[key]}")
    unclosed = _unclosed(text, key)
    if unclosed:
        raise SpaceError(f"--param {item!r}: {unclosed}")
    m = _RANGE.fullmatch(text)
    if m:
        return _parse_range(key, item, m["fn"], m["args"])
    if text.startswith("[") and text.endswith("]"):
        return _parse_list(key, item, text)
    if text.startswith("{") and text.endswith("}"):
        return _parse_bundles(key, item, text)
    raise SpaceError(f"--param {item!r}: {text!r} is not a space ({_SPACE_HELP})")


def parse_spaces(items: tuple[str, ...] | list[str], sets: tuple[str, ...] | list[str] = (),
                 owned: dict[str, str] | None = None) -> list[Space]:
    """Every ``--param`` parsed; also refuses a key swept twice, a key both swept and given with
    ``--set``, and the keys the sweep ``owned`` for this command (e.g. ``run.total_kimg`` under
    ``--budget-kimg``). Raises one ``SpaceError`` listing every problem."""
    from gan_kit import parse_set

    problems, spaces = [], []
    owned = owned or {}
    for item in items:
        try:
            spaces.append(parse_space(item))
        except SpaceError as e:
            problems.append(str(e))
    set_keys = {}
    for s in sets:
        try:
            set_keys[".".join(map(str, parse_set(s)[0]))] = s
        except ValueError:
            pass  # the recipe loader reports it with the other problems
    def overlap(key: str, others: dict[str, str]) -> str | None:  # the same key, or a table and a key in it
        return next((k for k in others if k == key or key.startswith(k + ".") or k.startswith(key + ".")), None)

    seen: dict[str, str] = {}
    for sp in spaces:
        for key in sorted(sp.keys()):
            if key in OWNED_KEYS or key in owned:
                problems.append(f"--param {sp.text!r}: {key} is set by the sweep: {OWNED_KEYS.get(key) or owned[key]}")
            elif (other := overlap(key, seen)) and seen[other] != sp.text:
                problems.append(f"--param {sp.text!r}: {key} is already swept by --param {seen[other]!r} "
                                f"(sweep each key once; keys that change together go in one bundle)")
            elif other := overlap(key, set_keys):
                problems.append(f"--param {sp.text!r}: {key} is also given by --set {set_keys[other]!r} (drop one)")
            seen.setdefault(key, sp.text)
    if problems:
        raise SpaceError("\n".join(problems))
    return spaces


# ------------------------------------------------------------------ configurations --


def config_key(params: dict[str, Any]) -> str:
    """A configuration's identity: its Optuna params as canonical JSON."""
    return json.dumps(params, sort_keys=True)


def config_label(params: dict[str, Any]) -> str:
    """``loss.name=hinge, optim.lr=0.001`` for tables and logs."""
    def short(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    # No --param: one configuration, the recipe as given (a seeds-only study).
    return ", ".join(f"{k}={short(v)}" for k, v in params.items()) or "the recipe as given"


def configurations(spaces: list[Space]) -> list[dict[str, Any]]:
    """Every configuration of a grid, in ``--param`` order (the last key varies fastest)."""
    grids = [sp.grid() for sp in spaces]
    return [dict(zip((sp.key for sp in spaces), combo)) for combo in itertools.product(*grids)]


_BUNDLE_HINT = ("keys that must change together go in one --param as named bundles, e.g. --param "
                "'objective={hinge-gp = {loss.name = \"hinge\"}, wgan-gp = {loss.name = \"wgan-gp\", penalty = []}}'")

#: Above this many combinations of the probe values, each value is checked with the others at
#: their first one (every combination would take too long).
MAX_CHECKED = 1024


def check_spaces(recipe_path: Path, spaces: list[Space], sets: list[str], plugins: Any,
                 extra: Any = None) -> None:
    """Load the recipe with the spaces' probe values (every choice, a range's ends) and ``sets``,
    before anything trains; ``extra(recipe) -> str | None`` checks a loaded recipe further. A
    value that cannot train alone nor with any value of the other spaces is named with its
    ``--param`` (the problem of loading it alone); otherwise a combination that cannot train is
    named. Raises ``SpaceError``."""
    from gan_kit import load_recipe

    swept = {k for sp in spaces for k in sp.keys()}
    given = f"{recipe_path} (--set): "

    def problem(items: list[str]) -> str | None:
        try:
            recipe = load_recipe(recipe_path, [*sets, *items], plugins=plugins)[0]
        except RecipeError as e:
            msg = e.problems[0] if e.problems else str(e)
            key = msg[len(given):].split(":", 1)[0] if msg.startswith(given) else ""
            if any(key == k or key.startswith(k + ".") for k in swept):  # the loader calls every override --set
                msg = f"{recipe_path} (--param): {msg[len(given):]}"
            return msg
        return extra(recipe) if extra is not None else None

    probes = [sp.probes() for sp in spaces]
    total = math.prod(len(p) for p in probes)
    if total <= MAX_CHECKED:
        combos = list(itertools.product(*probes))
    else:
        first = [p[0] for p in probes]
        combos = [tuple(first[:i] + [v] + first[i + 1:]) for i, p in enumerate(probes) for v in p]
    failed = {c: msg for c in combos if (msg := problem([x for sp, v in zip(spaces, c) for x in sp.sets(v)]))}
    if not failed:
        return
    problems = []
    for i, sp in enumerate(spaces):
        bad = {}
        for v in probes[i]:
            alone = problem(sp.sets(v))
            if alone and all(c in failed for c in combos if c[i] == v):
                bad[v] = alone
        if bad and len(bad) == len(probes[i]):
            problems.append(f"--param {sp.text!r}: {next(iter(bad.values()))}")
        elif bad:
            v, msg = next(iter(bad.items()))
            hint = "" if sp.kind != "choice" or f": {sp.key}:" in msg else f" ({_BUNDLE_HINT})"
            problems.append(f"--param {sp.text!r}: value {_toml(v)} cannot train: {msg}{hint}")
    if not problems:
        rest = [c for c in combos if c in failed]
        label = config_label({sp.key: v for sp, v in zip(spaces, rest[0])})
        more = f" ({len(rest) - 1} more such configurations)" if len(rest) > 1 else ""
        problems.append(f"configuration {label} cannot train{more}: {failed[rest[0]]} ({_BUNDLE_HINT})")
    raise SpaceError("\n".join(problems))
