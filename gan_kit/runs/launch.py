"""Which recipe ``gankit run`` trains with: a recipe file, or - with ``--resume`` - the recipe
saved in a run's checkpoint, with ``--set`` and ``--out`` applied. Values typed on the command
line (``--out``, ``--set data.path=...``) are relative to the working directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from gan_kit.base.errors import GankitError
from gan_kit.recipe import Recipe, load_recipe
from gan_kit.runs.layout import CheckpointLayout

__all__ = ["continue_or_start", "load_for_run", "prepare_run", "restarted", "resume_source"]


def restarted() -> bool:
    """True in a worker torchrun started again after a failure (``TORCHELASTIC_RESTART_COUNT`` >
    0: ``--max-restarts``, an elastic job losing a node): it continues its run directory instead
    of starting over (see ``continue_or_start``)."""
    import os

    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    except ValueError:
        return False


def continue_or_start(recipe_path: Path | None, out_dir: Path | None, overrides: tuple[str, ...]) -> tuple[str | None, bool]:
    """``(resume, overwrite)`` for ``gankit run RECIPE --resume-if-exists`` (and for a worker
    torchrun restarted): ``(run_dir, False)`` when the run directory holds
    ``checkpoints/latest.pt`` - continue it (the recipe must be one the run may resume with,
    else the resume refuses in one line naming the key); ``(None, True)`` when it holds this
    same recipe's earlier start that stopped before its first checkpoint (its ``recipe.toml``
    equals the recipe): start it again; else ``(None, False)``: a fresh start, refused as usual
    when the folder holds another run. Raises ``GankitError`` without a RECIPE."""
    import tomllib

    if recipe_path is None:
        raise GankitError("--resume-if-exists: give the RECIPE the run starts from when its run directory holds "
                          "no checkpoint (gankit run RECIPE --out DIR --resume-if-exists)")
    recipe, _ = load_recipe(recipe_path, list(overrides))
    run_dir = Path(out_dir) if out_dir is not None else Path(recipe.run.out_dir)
    if CheckpointLayout(run_dir).latest.is_file():
        return str(run_dir), False
    saved = run_dir / "recipe.toml"
    if saved.is_file():
        def table(text: str) -> dict:
            t = tomllib.loads(text)
            t.get("run", {}).pop("out_dir", None)
            return t

        from gan_kit.recipe import recipe_to_toml

        try:
            same = table(saved.read_text(encoding="utf-8")) == table(recipe_to_toml(recipe))
        except (OSError, tomllib.TOMLDecodeError):
            same = False
        return None, same
    return None, False


def resume_source(resume: str, out_dir: Path | None) -> tuple[Path, Path] | None:
    """``(run_dir, checkpoint)`` when ``--resume`` names a checkpoint file: the run folder is
    ``--out`` if given, else the one the file lies in (``RUN/checkpoints/x.pt``). None when
    ``resume`` names a run folder (or nothing). Raises ``GankitError`` for a file outside a run
    folder given without ``--out``."""
    if not resume:
        return None
    path = Path(resume)
    if not (path.suffix == ".pt" or path.is_file()):
        return None
    if out_dir is not None:
        return Path(out_dir), path
    run_dir = CheckpointLayout.run_dir_of(path)
    if run_dir is None:
        raise GankitError(f"--resume {path}: the checkpoint is not in a run's checkpoints/ folder; name the run "
                          f"directory to continue in with --out")
    return run_dir, path


def _with_out(recipe: Recipe, out_dir: Path | None) -> Recipe:
    if out_dir is None:
        return recipe
    return attrs.evolve(recipe, run=attrs.evolve(recipe.run, out_dir=str(out_dir)))


def load_for_run(recipe_path: Path | None, out_dir: Path | None, overrides: tuple[str, ...],
                 resume: str | None) -> tuple[Recipe, Any, list[str]]:
    """``(recipe, plugins, changes)`` for ``gankit run``: ``prepare_run`` with the resume
    point's recipe changes (``[]`` for a fresh run)."""
    recipe, plugins, point = prepare_run(recipe_path, out_dir, overrides, resume)
    return recipe, plugins, list(point.changes) if point is not None else []


def prepare_run(recipe_path: Path | None, out_dir: Path | None, overrides: tuple[str, ...],
                resume: str | None) -> tuple[Recipe, Any, Any]:
    """``(recipe, plugins, resume point)`` for ``gankit run``; the point (a
    ``gan_kit.runs.resume.ResumePoint``: the checkpoint read once, the recipe changes) is None
    for a fresh run.

    Fresh run: ``recipe_path`` is required. Resume (``resume`` is not None; ``""`` when
    ``--resume`` came without a folder; a checkpoint file: see ``resume_source``, whose saved
    recipe is used): the run directory is ``resume``, else ``--out``, else the
    recipe's ``run.out_dir``; the recipe is the checkpoint's, or ``recipe_path`` when given, with
    ``overrides`` on top; the point's ``changes`` list what differs from the checkpoint (refused
    changes raise ``CheckpointError``). Raises ``GankitError`` with the command that works.
    """
    from gan_kit.runs import checkpoint as ckpt
    from gan_kit.runs.resume import ResumePoint, recipe_changes, refused_override
    from gan_kit.runs.rundir import no_checkpoint_problem

    if resume is None:
        if recipe_path is None:
            raise GankitError("gankit run: give a RECIPE file (e.g. gankit run recipes/pggan.toml), or "
                              "--resume RUN_DIR to continue a run")
        recipe, plugins = load_recipe(recipe_path, list(overrides))
        return _with_out(recipe, out_dir), plugins, None
    if resume and recipe_path is None and Path(resume).suffix == ".toml":
        recipe_path, resume = Path(resume), ""  # `gankit run --resume recipes/x.toml`
    source = resume_source(resume, out_dir)
    if source is not None:  # `--resume runs/x/checkpoints/phase-1-8px.pt`
        run_dir, checkpoint = source
        if not checkpoint.is_file():
            raise GankitError(f"--resume: no checkpoint file {checkpoint} (list the run's checkpoints/ folder)")
        if checkpoint.parent.parent.absolute() != run_dir.absolute():
            from gan_kit.runs.rundir import run_dir_problem

            problem = run_dir_problem(run_dir)
            if problem:  # branching a run off into a folder that holds another run
                raise GankitError(f"--resume {checkpoint} --out {run_dir}: {problem}")
    elif resume:
        run_dir = Path(resume)
        if out_dir is not None and Path(out_dir) != run_dir:
            raise GankitError(f"--resume {run_dir} and --out {out_dir} name two run directories (give one)")
    elif out_dir is not None:
        run_dir = Path(out_dir)
    elif recipe_path is not None:
        run_dir = Path(load_recipe(recipe_path, list(overrides))[0].run.out_dir)
    else:
        raise GankitError("--resume: name the run directory (gankit run --resume runs/NAME)")
    if source is None:
        checkpoint = CheckpointLayout(run_dir).latest
        if not checkpoint.is_file():
            raise GankitError(no_checkpoint_problem(run_dir))
    state = ckpt.load(checkpoint, map_location="cpu")  # the only read of the checkpoint on the way to training
    if state.get("imported"):
        raise GankitError(f"--resume: {checkpoint} is a model imported from {state['imported'].get('format')}: gankit "
                          f"takes its weights (and ADA's p), not its optimizer state or counters, so there is no "
                          f"gankit run to continue; start one from its weights with gankit run RECIPE --init-from "
                          f"{checkpoint}")
    saved = state["recipe"]
    refused_override(overrides, run_dir, saved)
    if recipe_path is not None:
        recipe, plugins = load_recipe(recipe_path, list(overrides))
    else:
        recipe, plugins = load_recipe(run_dir / "recipe.toml", list(overrides), text=saved)
    recipe = _with_out(recipe, run_dir)
    changes = recipe_changes(saved, recipe, checkpoint, run_dir, plugins)
    return recipe, plugins, ResumePoint(checkpoint=checkpoint, state=state, changes=tuple(changes))
