"""Option fields for component ``Options`` classes, and conversion of recipe values to them.

Every component declares a frozen attrs class whose fields are its recipe keys::

    @attrs.frozen
    class Options:
        weight: float = option(10.0, help="Multiplier of the penalty in the D objective.")

``convert(value, type)`` turns TOML values into the declared type (an integer where a float is
declared, an array where a tuple is declared, a table keyed by strings where ``dict[int, ...]`` is
declared) and raises ``ValueError`` with a short reason otherwise.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any, Literal, Union

import attrs

__all__ = ["option", "convert", "describe_type", "option_fields"]

_MISSING = attrs.NOTHING


def option(default: Any = _MISSING, *, help: str, factory: Any = None, validator: Any = None):
    """An attrs field with ``help`` text in its metadata (units, meaning of None).

    Use a ``factory`` for mutable defaults. ``validator(value) -> str | None`` may return a
    problem description; it is checked at recipe load with the other problems.
    """
    meta = {"help": help}
    if validator is not None:
        meta["validator"] = validator
    if factory is not None:
        return attrs.field(factory=factory, metadata=meta)
    return attrs.field(default=default, metadata=meta)


def option_fields(options_cls: type) -> tuple[attrs.Attribute, ...]:
    """The fields of an Options class with their annotations resolved to real types."""
    attrs.resolve_types(options_cls)
    return attrs.fields(options_cls)


def describe_type(tp: Any) -> str:
    """A short human name of a declared type: ``float``, ``int | None``, ``dict[int, int]``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(describe_type(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    if origin in (tuple, list):
        args = typing.get_args(tp)
        inner = describe_type(args[0]) if args else "any"
        return f"array of {inner}"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"table {describe_type(k)} -> {describe_type(v)}"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _tname(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def convert(value: Any, tp: Any) -> Any:
    """Convert a TOML value to ``tp``; raise ``ValueError("expected X, got Y")`` if impossible."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed and type(value) is type(allowed[0]):
            return value
        raise ValueError(f"expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        # TOML has no null; None is only ever the default, but accept "none" for clarity.
        errors = []
        for a in args:
            if a is type(None):
                if value is None:
                    return None
                continue
            try:
                return convert(value, a)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(f"expected {describe_type(tp)}, got {_tname(value)} {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise ValueError(f"expected None, got {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"expected boolean, got {_tname(value)} {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"expected integer, got {_tname(value)} {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            f = float(value)
            if math.isnan(f):
                raise ValueError("expected a number, got nan")
            return f
        raise ValueError(f"expected float, got {_tname(value)} {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"expected string, got {_tname(value)} {value!r}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected {describe_type(tp)}, got {_tname(value)} {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ValueError(f"expected an array of {len(args)} items, got {len(value)}")
            return tuple(convert(v, a) for v, a in zip(value, args))
        inner = args[0] if args else Any
        out = [convert(v, inner) for v in value]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"expected {describe_type(tp)}, got {_tname(value)} {value!r}")
        kt, vt = typing.get_args(tp)
        out = {}
        for k, v in value.items():
            if kt is int:
                try:
                    key = int(k)
                except (TypeError, ValueError):
                    raise ValueError(f"table key {k!r} is not an integer") from None
            else:
                key = convert(k, kt)
            try:
                out[key] = convert(v, vt)
            except ValueError as e:
                raise ValueError(f"at key {k}: {e}") from None
        return out
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ValueError(f"expected {describe_type(tp)}, got {_tname(value)} {value!r}")
