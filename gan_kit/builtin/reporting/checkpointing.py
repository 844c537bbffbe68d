"""The checkpointer, built on the lifecycle hooks: ``checkpoints/latest.pt`` every
``run.snapshot_ticks`` ticks and at the end (on the final tick, before the final metrics), ``checkpoints/phase-<i>-<res>px.pt`` for every
finished phase (the last one as the run finishes), and - as the recipe asks - the last
``run.keep_snapshots`` snapshots and one every ``run.keep_every_ticks`` ticks as
``snapshot-<kimg>.pt``. Writes are atomic
(``gan_kit.runs.checkpoint.save_atomic``); a kept snapshot is a hard link to the ``latest.pt`` just
written, with the files saved beside it (``CheckpointLayout.link``; a copy where links are not
supported), so keeping costs no second write. The file names are ``run.checkpoints``'."""

from __future__ import annotations

from pathlib import Path

from gan_kit import StashKey, hookimpl


def keep_snapshot(run, latest: Path, tick: int) -> None:
    """Keep ``latest`` as ``snapshot-<kimg>-tick<N>.pt`` and delete kept snapshots beyond the
    recipe's ``keep_snapshots`` newest, except those on a multiple of ``keep_every_ticks``."""
    last, every = run.options.keep_snapshots, run.options.keep_every_ticks
    if not last and not every:
        return
    run.checkpoints.link(latest, run.checkpoints.snapshot(run.cur_nimg, tick))
    kept = run.checkpoints.snapshots()
    recent = {t for t, _ in kept[-last:]} if last else set()
    for t, p in kept:
        if t not in recent and not (every and t % every == 0):
            run.checkpoints.remove(p)


#: ``(cur_nimg, path)`` of the ``latest.pt`` written on the final tick (before the final metrics).
final_written = StashKey[tuple]()


@hookimpl(wrapper=True)
def tick_finished(run, stats):
    """A wrapper around every other ``tick_finished``: on the final tick ``latest.pt`` is written
    first, before the final metrics and reporters run, so a long or failing final evaluation
    (or a job killed during it) cannot lose it; a periodic snapshot is written after them."""
    if stats.get("Progress/final"):
        path = run.save_checkpoint()
        if path is not None:
            run.stash[final_written] = (run.cur_nimg, path)
    result = yield
    every = run.options.snapshot_ticks
    tick = stats["Progress/tick"]
    if every and not stats.get("Progress/final") and (tick + 1) % every == 0:
        path = run.save_checkpoint()
        if path is not None:
            keep_snapshot(run, path, tick)
    return result


@hookimpl(trylast=True)
def phase_started(run, phase):
    prev = run.previous_phase
    if prev is not None:
        run.save_checkpoint(run.checkpoints.phase(prev), phase=prev)  # shown at the finished phase
        run.save_checkpoint()


@hookimpl(trylast=True)
def run_finished(run, stats):
    # Written on the final tick already (tick_finished above), unless a plugin ended the run
    # without one.
    nimg, path = run.stash.get(final_written, (None, None))
    if nimg != run.cur_nimg:
        path = run.save_checkpoint()
    if path is not None:
        # The last phase ends with the run: it gets its phase checkpoint like every other one
        # (the same state as latest.pt, so a link, not a second write). A run that ends inside a
        # phase (run.max_minutes) leaves it unfinished: no phase checkpoint for it.
        if run.phase_finished:
            run.checkpoints.link(path, run.checkpoints.phase(run.phase))
        keep_snapshot(run, path, stats["Progress/tick"])
