"""Example gankit plugin with lifecycle hooks only: it registers no component.

``losses.csv``: writes every iteration's D and G loss to ``<run dir>/losses.csv`` and counts
the phases and ticks it saw. Its state lives in ``run.stash`` under a module-level
``StashKey`` (typed, and no other plugin can collide with it); the file is closed in
``run_teardown``, which fires from a ``finally`` - after success, an error or Ctrl-C alike.

Hook-only plugins are listed by ``gankit plugins`` with their hooks, and can be switched off by
name like any other (``GANKIT_DISABLE_PLUGINS=lifecycle_plugin.py``).

Use it::

    plugins = ["lifecycle_plugin.py"]
"""

from __future__ import annotations

from typing import IO, Any, Mapping

import attrs

from gan_kit import Phase, Run, StashKey, hookimpl


@attrs.define
class LossLog:
    """What this plugin keeps during one run."""

    file: IO[str] | None
    steps: int = 0
    phases: list[int] = attrs.field(factory=list)
    ticks: int = 0


#: This plugin's state on a run: ``run.stash[log_key]``.
log_key = StashKey[LossLog]()


@hookimpl
def run_started(run: Run) -> None:
    # Only rank 0 writes files; the other processes keep counting (file None).
    file = (run.out_dir / "losses.csv").open("a", encoding="utf-8") if run.is_main else None
    if file is not None and file.tell() == 0:
        file.write("step,kimg,Loss/D,Loss/G\n")
    run.stash[log_key] = LossLog(file)


@hookimpl
def phase_started(run: Run, phase: Phase) -> None:
    run.stash[log_key].phases.append(phase.resolution)


@hookimpl
def step_finished(run: Run, stats: Mapping[str, float]) -> None:
    # On the hot path: one formatted line, no device work (stats are already floats).
    log = run.stash[log_key]
    log.steps += 1
    if log.file is not None:
        log.file.write(f"{run.step},{run.cur_nimg / 1000:.3f},{stats.get('Loss/D', '')},{stats.get('Loss/G', '')}\n")


@hookimpl(tryfirst=True)
def tick_finished(run: Run, stats: dict[str, Any]) -> None:
    log = run.stash[log_key]
    log.ticks += 1
    stats["Example/steps_logged"] = log.steps  # tryfirst: reporters (metrics.jsonl) see it


@hookimpl
def run_teardown(run: Run, error: BaseException | None) -> None:
    # Must not raise; run_started may not have run (an error before it), hence .get.
    log = run.stash.get(log_key, None)
    if log is not None and log.file is not None:
        log.file.close()
