"""The checkpointer, built on the lifecycle hooks: ``checkpoints/latest.pt`` every
``run.snapshot_ticks`` ticks and at the end, and ``checkpoints/phase-<i>-<res>px.pt`` for every
finished phase. Writes are atomic (gan_kit.checkpoint.save_atomic)."""

from __future__ import annotations

from gan_kit import hookimpl


@hookimpl(trylast=True)
def tick_finished(run, stats):
    every = run.options.snapshot_ticks
    if every and not stats.get("Progress/final") and (stats["Progress/tick"] + 1) % every == 0:
        run.save_checkpoint("latest")


@hookimpl(trylast=True)
def phase_started(run, phase):
    prev = run.previous_phase
    if prev is not None:
        run.save_checkpoint(f"phase-{prev.index}-{prev.resolution}px")
        run.save_checkpoint("latest")


@hookimpl(trylast=True)
def run_finished(run, stats):
    run.save_checkpoint("latest")
