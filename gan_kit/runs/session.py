"""A run's session around the training loop: what ``gankit run`` (and ``gan_kit.testing``, the
sweeps' trials, a script) does with a built ``Run`` - the run directory opened once and closed
however training ends, then the loop (``gan_kit.runs.engine.loop``).

Opening the run directory (``run_dir_session``) is the session's job, as pytest's
``wrap_session`` owns a session's set-up and ``finally``: rank 0 takes the directory's lock
(``gan_kit.runs.lock``); a fresh run checks that the folder holds no other run (``--overwrite``
deletes that run's files); a resumed run is restored once from the ``ResumePoint`` resolved
before the run was built (``gan_kit.runs.launch.prepare_run``: the checkpoint read once) and
its recipe changes are printed; ``recipe.toml`` is written; the recipe's schedules and
optimizer settings are applied at the resumed position. The lock is released on the way out.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from gan_kit.base.errors import GankitError
from gan_kit.runs.engine import Run, loop
from gan_kit.runs.lock import lock_run_dir
from gan_kit.runs.resume import ResumePoint, finished_problem, resume_run
from gan_kit.runs.rundir import clear_run_dir, run_dir_problem, write_recipe
from gan_kit.training.distributed import broadcast_object

__all__ = ["train", "run_dir_session"]


def train(run: Run, *, resume: bool | str | Path | ResumePoint = False, max_steps: int | None = None,
          overwrite: bool = False) -> dict[str, Any]:
    """Open the run directory (``run_dir_session``), train (``gan_kit.runs.engine.loop``: until
    ``run.total_nimg`` images have been shown, or ``max_steps`` iterations, or
    ``run.max_minutes`` of training time), close it.

    ``resume``: continue from the run directory's latest checkpoint (True), the checkpoint file
    given, or the ``ResumePoint`` ``gankit run --resume`` resolved (not read again), exactly.
    A fresh run refuses a run directory that already holds a run (``GankitError``) unless
    ``overwrite`` removes that run's files first. While it trains, the run holds the directory's
    lock: a second run there is refused in one line naming this process. SIGINT (Ctrl-C) and
    SIGTERM finish the current iteration, write ``checkpoints/latest.pt`` and raise
    ``Interrupted``; a second Ctrl-C stops at once. Returns the final tick's stats. Raises
    ``TrainingError`` when the non-finite policy stops the run (no checkpoint is written after
    the last finite one).
    """
    with run_dir_session(run, resume, overwrite):
        return loop(run, max_steps)


@contextmanager
def run_dir_session(run: Run, resume: bool | str | Path | ResumePoint = False,
                    overwrite: bool = False) -> Iterator[None]:
    """Take the run directory's lock (rank 0), resume (printing each recipe change) or check that
    a fresh run may use the directory (``overwrite``: clear it), write ``recipe.toml`` and apply
    the schedules at the run's position; release the lock on leaving, however it is left.
    Raises ``GankitError`` (on every process alike) when the directory may not be used."""
    # Rank 0 decides and tells the others, so every process stops with the same line (instead
    # of the others failing later on a closed connection); after that the folder exists for
    # every process's hooks.
    lock, problem = lock_run_dir(run.out_dir) if run.is_main else (None, None)
    try:
        if problem is None and run.is_main and not resume:
            problem = None if overwrite else run_dir_problem(run.out_dir)
            if overwrite and problem is None:
                clear_run_dir(run.out_dir)
        if run.world_size > 1:
            problem = broadcast_object(problem)
        if problem:
            raise GankitError(problem)
        if lock is not None and lock.stale:
            print(f"note: {run.out_dir}: the run lock was left by a run that ended without releasing it "
                  f"({lock.stale}); taking it over", file=sys.stderr)
        if resume:
            for change in resume_run(run, resume if isinstance(resume, (str, Path, ResumePoint)) else None):
                if run.is_main:
                    print(f"note: resuming with a changed recipe: {change}", file=sys.stderr)
            finished = finished_problem(run.cur_nimg, run.train_seconds, run.recipe)
            if finished:
                raise GankitError(finished)
        if run.is_main:
            write_recipe(run)
        run.apply_schedules()  # at the resumed cur_nimg
        run.apply_optim_settings()
        yield
    finally:
        if lock is not None:
            lock.release()


