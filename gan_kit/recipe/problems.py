"""The ``Problems`` collector: every problem of a recipe, one ``<file>: <dotted.key>: <what> (<fix>)``
line each, with the file (or ``--set``) that gave each key its value."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["Problems", "key_parts", "describe"]

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def key_parts(key: str) -> tuple[str | int, ...]:
    """``"penalty[0].weight"`` -> ``("penalty", 0, "weight")``."""
    return tuple(int(m.group(2)) if m.group(2) is not None else m.group(1) for m in _PART.finditer(key))


def describe(value: Any) -> str:
    """A value as ``<TOML type> <TOML text>`` for messages, e.g. ``string "abc"``."""
    from gan_kit.base.options import toml_type_name, toml_value

    return f"{toml_type_name(value)} {toml_value(value)}"


class Problems:
    """Collects ``<file>: <dotted.key>: <what> (<fix>)`` lines.

    ``origin`` maps key paths to the file (or ``--set``) that gave them their value, so a problem
    in a value that came from an ``extends`` base names the base file.
    """

    def __init__(self, label: str):
        self.label = label
        self.lines: list[str] = []
        self.origin: dict[tuple, str] = {}
        #: The folder each recipe file (by label) resolves its relative paths against; None for
        #: text that came without a file (a checkpoint's recipe): the working directory.
        self.dirs: dict[str, Any] = {}

    def where(self, key: str) -> str:
        parts = key_parts(key)
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
