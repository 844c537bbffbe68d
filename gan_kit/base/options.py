"""Option fields for component ``Options`` classes, and conversion of recipe values to them.

Every component declares a frozen attrs class whose fields are its recipe keys::

    @attrs.frozen
    class Options:
        weight: float = option(10.0, help="Multiplier of the penalty in the D objective.")

``convert(value, type)`` turns TOML values into the declared type (an integer where a float is
declared, an array where a tuple is declared, a table keyed by strings where ``dict[int, ...]`` is
declared) and raises ``ValueError`` with a short reason otherwise. TOML has no null: where a
field's type allows ``None``, the string ``"none"`` stands for it (useful with ``--set`` to undo a
value set by an ``extends`` base).
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any, Literal, Union

import attrs

__all__ = ["option", "Range", "option_range", "range_problems", "convert", "ConvertError", "describe_type",
           "option_fields", "toml_value", "toml_key", "field_default", "schedulable", "INT64_MIN", "INT64_MAX"]

_MISSING = attrs.NOTHING


def option(default: Any = _MISSING, *, help: str, factory: Any = None, validator: Any = None,
           min: float | None = None, max: float | None = None, min_exclusive: bool = False,
           max_exclusive: bool = False, allow_inf: bool = False, hint: str | tuple[str, ...] | None = None,
           path: bool = False, schedulable: bool = False):
    """An attrs field with ``help`` text in its metadata (units, meaning of None).

    Use a ``factory`` for mutable defaults. ``validator(value) -> str | None`` may return a
    problem description; it is checked at recipe load with the other problems.

    Numbers (int and float options, and every number inside a tuple, list or table option) are
    range-checked at recipe load, element-wise: ``min`` / ``max`` bound them (inclusive unless
    ``min_exclusive`` / ``max_exclusive``); floats must be finite unless ``allow_inf`` (NaN is
    always refused); integers must fit int64 (what torch and numpy index and seed with). ``hint``
    is the fix printed after a range problem, e.g. ``"Adam's beta2, e.g. 0.99"`` (a tuple gives
    one per array item). A declared range
    is appended to ``help`` (``Allowed: > 0.``), so ``gankit list-plugins -v`` and docs/recipes.md
    show it.

    ``path``: the option is a file or folder path (a string). A relative one is resolved once, when
    the recipe is loaded, against the folder of the recipe file that sets it (an ``extends`` base
    resolves its own), or against the working directory when typed with ``--set``; the recipe a
    run saves holds the absolute path, so ``gankit run --resume`` works from any directory. ``~``
    paths are kept as written.

    ``schedulable``: the option may follow a schedule over training instead of a constant - the
    recipe writes ``{ schedule = "cosine", start = ..., end = ... }`` in its place (a float option,
    or an item of an array of floats), and before every iteration the engine sets the value for the
    images shown so far (docs/writing-plugins.md, "Schedules"). Only options the component reads
    while training may say so: a value fixed at build time (a layer size, the data) refuses a
    schedule at recipe load. Appends ``Schedulable.`` to ``help``.
    """
    if schedulable:
        help = f"{help.rstrip()} Schedulable."
    rng = Range(min=min, max=max, min_exclusive=min_exclusive, max_exclusive=max_exclusive,
                allow_inf=allow_inf, hint=hint)
    text = rng.text()
    if text or allow_inf:
        shown = f"Allowed: {text}" if text else "Allowed: any number"
        help = f"{help.rstrip()} {shown}{' (inf allowed)' if allow_inf else ''}."
    meta = {"help": help, "range": rng}
    if schedulable:
        meta["schedulable"] = True
    if path:
        meta["path"] = True
    if validator is not None:
        meta["validator"] = validator
    if factory is not None:
        return attrs.field(factory=factory, metadata=meta)
    return attrs.field(default=default, metadata=meta)


# --------------------------------------------------------------------------------- ranges --

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _num(v: float) -> str:
    """A bound as written in messages: ``0``, ``0.5``, ``2**32`` for large powers of two."""
    if isinstance(v, int) and v >= 2**16 and not v & (v - 1):
        return f"2**{v.bit_length() - 1}"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v)


@attrs.frozen
class Range:
    """Allowed values of a numeric option (see ``option``); ``check`` returns a problem or None."""

    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False
    allow_inf: bool = False
    hint: str | tuple[str, ...] | None = None

    def text(self, low_only: bool = False) -> str:
        """``"> 0"``, ``">= 1"``, ``"<= 8"``, ``"in [0, 1)"``, or ``""`` when unbounded;
        ``low_only``: only the lower bound where there is one (for a value below it)."""
        lo, hi = self.min, self.max
        low = f"{'>' if self.min_exclusive else '>='} {_num(lo)}" if lo is not None else ""
        if low and (low_only or hi is None):
            return low
        if lo is not None and hi is not None:
            return (f"in {'(' if self.min_exclusive else '['}{_num(lo)}, "
                    f"{_num(hi)}{')' if self.max_exclusive else ']'}")
        if hi is not None:
            return f"{'<' if self.max_exclusive else '<='} {_num(hi)}"
        return ""

    def default_fix(self, msg: str = "") -> str:
        """The fix after ``msg`` (from ``check``) for an option without a ``hint``."""
        if self.min == 0 and f"must be {self.text(low_only=True)}," in msg.replace("a finite number ", ""):
            return "use a positive number" if self.min_exclusive else "use 0 or a positive number"
        return f"use a value {self.text()}" if self.text() else "use a finite number"

    def check(self, v: Any) -> str | None:
        """``"must be ..., got v"`` if the number ``v`` is outside the range, else None. A value
        below the minimum (or NaN / inf where a minimum is declared) is told the lower bound,
        one above the maximum the whole range."""
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if isinstance(v, float) and (math.isnan(v) or (math.isinf(v) and not self.allow_inf)):
            text = self.text(low_only=True)
            return f"must be a finite number{' ' + text if text else ''}, got {v!r}"
        lo_bad = self.min is not None and (v <= self.min if self.min_exclusive else v < self.min)
        hi_bad = self.max is not None and (v >= self.max if self.max_exclusive else v > self.max)
        text = self.text(low_only=lo_bad)
        if lo_bad or hi_bad:
            return f"must be {text}, got {v!r}"
        if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:  # torch and numpy take int64
            return f"must {'be ' + text + ' and ' if text else ''}fit a 64-bit integer, got {v}"
        return None


_NO_RANGE = Range()


def option_range(f: attrs.Attribute) -> Range:
    """The ``Range`` of an option field (finite floats, int64 integers when none was declared)."""
    return f.metadata.get("range", _NO_RANGE)


def range_problems(value: Any, rng: Range, path: str = "") -> list[tuple[str, str]]:
    """Every number in ``value`` (nested tuples, lists and tables) outside ``rng``, as
    ``(path, message)``: path ``""`` for the value itself, ``"[1]"`` for an array item, ``".8"``
    for the entry of table key 8. Strings, booleans and None are not checked."""
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in range_problems(v, rng, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in range_problems(v, rng, f"{path}.{k}")]
    msg = rng.check(value)
    return [(path, msg)] if msg else []


def schedulable(f: attrs.Attribute) -> bool:
    """Whether option field ``f`` was declared ``option(..., schedulable=True)``."""
    return bool(f.metadata.get("schedulable"))


def float_typed(f: attrs.Attribute) -> bool:
    """Whether option field ``f`` (annotations resolved) holds a float: the only type a schedule
    may drive (``float``, ``float | None``, a tuple of floats; not a dict or str union)."""
    text = str(f.type)
    return "float" in text and "dict" not in text and "str" not in text


def option_fields(options_cls: type) -> tuple[attrs.Attribute, ...]:
    """The fields of an Options class with their annotations resolved to real types."""
    attrs.resolve_types(options_cls)
    return attrs.fields(options_cls)


class ConvertError(ValueError):
    """A value that cannot be converted; ``path`` leads from the option to the bad item
    (table keys and array indexes), empty when the option's value itself is wrong."""

    def __init__(self, msg: str, path: tuple = ()):
        super().__init__(msg)
        self.path = path


_TOML_NAMES = {bool: "boolean", int: "integer", float: "float", str: "string"}


def describe_type(tp: Any) -> str:
    """A short name of a declared type in TOML terms: ``float``, ``integer | none``,
    ``table integer -> integer``, ``array of float``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(toml_value(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(describe_type(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "none"
    if origin in (tuple, list):
        args = typing.get_args(tp)
        inner = describe_type(args[0]) if args else "any"
        return f"array of {inner}"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"table {describe_type(k)} -> {describe_type(v)}"
    if tp in _TOML_NAMES:
        return _TOML_NAMES[tp]
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def toml_type_name(value: Any) -> str:
    """The TOML name of a value's type (``"integer"``, ``"table"``, ...), for error messages."""
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def convert(value: Any, tp: Any) -> Any:
    """Convert a TOML value to ``tp``; raise ``ValueError("expected X, got Y")`` if impossible."""
    # One dispatch over the TOML value types on purpose: each branch is the rule for one declared
    # type, and the recursion for arrays and tables needs them all in one place.
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed and type(value) is type(allowed[0]):
            return value
        raise ValueError(f"expected one of {', '.join(toml_value(a) for a in allowed)}, got {toml_type_name(value)} {toml_value(value)}")
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        optional = type(None) in args
        if value is None and optional:
            return None
        if optional and isinstance(value, str) and value.lower() == "none" and str not in args:
            return None
        shaped = None  # the error of the arm with the value's own shape (table / array)
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(value, a)
            except ValueError as e:
                arm = typing.get_origin(a)
                if (isinstance(value, dict) and arm is dict) or (isinstance(value, list) and arm in (list, tuple)):
                    shaped = e
        if shaped is not None:
            raise shaped
        raise ValueError(f"expected {describe_type(tp)}, got {toml_type_name(value)} {toml_value(value)}")
    if tp is type(None):
        if value is None:
            return None
        raise ValueError(f"expected none, got {toml_type_name(value)} {toml_value(value)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"expected boolean, got {toml_type_name(value)} {toml_value(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"expected integer, got {toml_type_name(value)} {toml_value(value)}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer beyond float range; NaN and inf are left to the range check
                raise ValueError(f"expected float, got integer {value} (too large for a float)") from None
        raise ValueError(f"expected float, got {toml_type_name(value)} {toml_value(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"expected string, got {toml_type_name(value)} {toml_value(value)}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected {describe_type(tp)}, got {toml_type_name(value)} {toml_value(value)}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ValueError(f"expected an array of {len(args)} items, got {len(value)}: {toml_value(value)}")
        inner = args[0] if args else Any
        out = []
        for i, v in enumerate(value):
            if origin is tuple and args and args[-1] is not Ellipsis:
                inner = args[i]
            try:
                out.append(convert(v, inner))
            except ConvertError as e:
                raise ConvertError(str(e), (i, *e.path)) from None
            except ValueError as e:
                raise ConvertError(str(e), (i,)) from None
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"expected {describe_type(tp)}, got {toml_type_name(value)} {toml_value(value)}")
        kt, vt = typing.get_args(tp)
        out = {}
        for k, v in value.items():
            if kt is int:
                try:
                    key = int(k)
                except (TypeError, ValueError):
                    raise ConvertError(f"table key {toml_value(k)} is not an integer") from None
            else:
                key = convert(k, kt)
            try:
                out[key] = convert(v, vt)
            except ConvertError as e:
                raise ConvertError(str(e), (k, *e.path)) from None
            except ValueError as e:
                raise ConvertError(str(e), (k,)) from None
        return out
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ValueError(f"expected {describe_type(tp)}, got {toml_type_name(value)} {toml_value(value)}")


def toml_value(value: Any) -> str:
    """``value`` written as one-line TOML (for messages and fixes): ``0``, ``"auto"``, ``[0.0, 0.99]``,
    ``{ 4 = 64, 8 = 32 }``; ``None`` is written ``"none"``."""
    import tomli_w

    if value is None:
        return '"none"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    try:
        return tomli_w.dumps({"v": value}).strip()[4:]
    except (TypeError, ValueError):
        return repr(value)


def toml_key(key: Any) -> str:
    """A TOML key: bare when it can be (``lr``, ``16``, ``fade-kimg``), else a quoted string."""
    import re

    text = str(key)
    return text if re.fullmatch(r"[A-Za-z0-9_-]+", text) else toml_value(text)


def field_default(f: attrs.Attribute) -> Any:
    """The default of an option field (a factory is called), or ``attrs.NOTHING`` if required."""
    default = f.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory()
    return default
