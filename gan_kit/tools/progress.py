"""A progress bar with the time left for the long passes of ``gankit eval`` (50,000 generated images
and a whole data set through a backbone): rich's, on standard error, only when it is a terminal.

``showing_progress()`` turns it on around an evaluation; ``watched(label, load, n, size)`` wraps an
image set's batch loader so every batch read advances the bar of ``label``. A set read twice (a
reading pass that finds its features in the cache by the images' digest, then the features pass)
starts its bar again. Outside ``showing_progress`` (training, tests, a pipe) ``watched`` returns
``load`` itself.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator

__all__ = ["showing_progress", "watched", "active_bar"]

_active: dict[str, Any] = {}


@contextlib.contextmanager
def showing_progress(enabled: bool = True) -> Iterator[None]:
    """Show bars for the image sets ``watched`` within (when ``enabled`` and standard error is a
    terminal); the bars vanish when done."""
    if not enabled or not sys.stderr.isatty() or _active:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("images,"), TimeRemainingColumn(), TextColumn("left"),
                        console=Console(stderr=True), transient=True)
    _active["progress"], _active["tasks"] = progress, {}
    try:
        with progress:
            yield
    finally:
        _active.clear()


def active_bar() -> Any:
    """The rich ``Progress`` shown now, or None."""
    return _active.get("progress")


def watched(label: str, load: Callable[[int], Any], n: int, size: int) -> Callable[[int], Any]:
    """``load`` (batch ``i`` of ``size`` images of a set of ``n``) advancing the bar ``label`` by
    each batch's images while ``showing_progress`` is on."""
    def load_and_count(i: int) -> Any:
        progress = _active.get("progress")
        if progress is None:
            return load(i)
        tasks = _active["tasks"]
        key = (label, n)
        if key not in tasks:
            tasks[key] = progress.add_task(label, total=n)
        task = tasks[key]
        if progress.tasks[task].finished:  # a second pass over the same set
            progress.reset(task, total=n, description=f"{label} (features)")
        out = load(i)
        progress.advance(task, min(size, n - i * size))
        return out

    return load_and_count
