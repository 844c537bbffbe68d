"""The sync census: host-device synchronisations per training iteration of the real engine.

``sync_census(recipe, overrides, steps)`` trains ``steps`` iterations of a recipe with
``gan_kit.runs.session.train`` under a ``gan_kit.base.syncs.SyncCounter`` and returns how many
synchronisations each iteration made, which iterations ended a tick or a phase (where the engine
reads its stats, checks the weights and writes checkpoints, so a few syncs are expected there),
and what they were. tests/test_syncs.py holds every shipped recipe to at most one per iteration
(averaged over the other iterations); benchmarks/gpu_bench.py prints the figure.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

import attrs

from gan_kit.base.syncs import SyncCounter

__all__ = ["SyncCensus", "sync_census"]


@attrs.define
class SyncCensus:
    """``per_iteration[i]``: the syncs of iteration ``i + 1`` (from the end of the previous
    iteration's hooks to the end of its own); ``boundary``: the 1-based iterations that ended a
    tick or a phase; ``by_kind``: every sync counted, by op."""

    per_iteration: list[int]
    boundary: set[int]
    by_kind: dict[str, int]

    @property
    def steady(self) -> list[int]:
        """The counts of the iterations that ended no tick and no phase, the first left out
        (it builds lazy state: ADA's p moves to the device, compiled graphs are made)."""
        return [n for i, n in enumerate(self.per_iteration, 1) if i not in self.boundary and i > 1]

    @property
    def mean(self) -> float:
        steady = self.steady
        return sum(steady) / len(steady) if steady else float("nan")


class _Marks:
    """A plugin noting the counter at every iteration boundary and which iterations ended a tick
    or a phase. It reads no stats (reading one is a sync: it would count itself)."""

    def __init__(self, counter: SyncCounter):
        self.counter, self.marks, self.boundary = counter, [0], set()
        self.steps = 0

    def step_finished(self, run, stats):
        self.steps += 1
        self.marks.append(self.counter.mark())

    def tick_finished(self, run, stats):
        self.boundary.add(self.steps + 1)  # the tick runs after step_finished: in the next window

    def phase_started(self, run, phase):
        self.boundary.add(self.steps + 1)  # the iteration that enters a phase checks and checkpoints first


def sync_census(recipe_path: str | Path, overrides: Sequence[str] = (), steps: int = 8,
                out_dir: str | Path | None = None, extra_plugins: Sequence = ()) -> SyncCensus:
    """Train ``steps`` iterations of ``recipe_path`` (with ``overrides``, ``--set`` syntax, and
    ``extra_plugins``) in a fresh run directory, counting host syncs per iteration.
    ``run.progress`` is off (a progress bar reads the stats by design, at most twice a second)."""
    from gan_kit.plugin_api.hookspecs import hookimpl
    from gan_kit.runs.session import train
    from gan_kit.recipe import load_recipe
    from gan_kit.runs.run import build_run

    counter = SyncCounter()
    marks = _Marks(counter)

    class Hooks:
        @hookimpl(trylast=True)
        def step_finished(self, run, stats):
            marks.step_finished(run, stats)

        @hookimpl
        def tick_finished(self, run, stats):
            marks.tick_finished(run, stats)

        @hookimpl
        def phase_started(self, run, phase):
            marks.phase_started(run, phase)

    with tempfile.TemporaryDirectory(prefix="gankit-census-") as tmp:
        out = Path(out_dir) if out_dir is not None else Path(tmp) / "run"
        recipe, plugins = load_recipe(recipe_path, [f"run.out_dir='{out.as_posix()}'", "run.progress=false",
                                                    *overrides], extra_plugins=[Hooks(), *extra_plugins])
        run = build_run(recipe, plugins)
        with counter:
            train(run, max_steps=steps)
    counts = [b - a for a, b in zip(marks.marks, marks.marks[1:])]
    return SyncCensus(per_iteration=counts, boundary=marks.boundary, by_kind=dict(counter.by_kind))


if os.environ.get("GANKIT_CENSUS_DEBUG"):  # pragma: no cover - a maintainer's aid
    import traceback

    _record = SyncCounter.record

    def _traced(self, kind):  # type: ignore[no-untyped-def]
        if not self._paused:
            print(kind, "".join(traceback.format_stack(limit=8)[:-2]))
        _record(self, kind)

    SyncCounter.record = _traced  # type: ignore[method-assign]
