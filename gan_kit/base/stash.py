"""Typed per-plugin state on a run (pytest's ``Stash`` / ``StashKey`` is the model).

A plugin makes a module-level key once and keeps its state under it::

    from gan_kit import StashKey

    writer_key = StashKey[SummaryWriter]()

    @hookimpl
    def run_started(run):
        run.stash[writer_key] = SummaryWriter(...)

Keys are objects, not strings, so two plugins can never collide, and a type checker knows the
type of ``run.stash[writer_key]``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast

__all__ = ["Stash", "StashKey"]

T = TypeVar("T")
D = TypeVar("D")


class StashKey(Generic[T]):
    """A key into a ``Stash``; make one per piece of state, at module level."""

    __slots__ = ()


class Stash:
    """A mapping from ``StashKey[T]`` to values of type ``T``."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[StashKey[Any], object] = {}

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._data[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        """The value under ``key``; ``KeyError`` if none was set."""
        return cast(T, self._data[key])

    def get(self, key: StashKey[T], default: D) -> T | D:
        try:
            return self[key]
        except KeyError:
            return default

    def setdefault(self, key: StashKey[T], default: T) -> T:
        try:
            return self[key]
        except KeyError:
            self[key] = default
            return default

    def __delitem__(self, key: StashKey[T]) -> None:
        del self._data[key]

    def __contains__(self, key: StashKey[T]) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)
