"""The run directory: whether a fresh run may start in it, clearing it for ``--overwrite``, the
resolved ``recipe.toml``, and the checks ``gankit run --nproc N`` makes once before starting N
processes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from gan_kit.base.version import __version__
from gan_kit.plugin_api.components import BuildContext
from gan_kit.base.errors import GankitError
from gan_kit.base.phase import Phase
from gan_kit.recipe import Recipe, recipe_to_toml
from gan_kit.runs.layout import CheckpointLayout

__all__ = ["RUN_FILES", "run_dir_problem", "clear_run_dir", "write_recipe", "batch_problem", "preflight",
           "resume_command"]

#: What a run writes into its directory (``--overwrite`` deletes exactly these).
RUN_FILES = ("metrics.jsonl", "recipe.toml", "samples", "checkpoints", "events", "report", "report.html")


def resume_command(out_dir: Path) -> str:
    """The command that continues the run in ``out_dir``: ``gankit run --resume DIR`` with DIR
    absolute, so it works from any working directory (the recipe's paths are saved absolute too);
    with ``--nproc N`` when ``gankit run --nproc N`` started the processes (``GANKIT_NPROC``);
    under a torchrun of the user's own, that torchrun command with ``gankit run --resume DIR``
    (or the same command with ``--resume-if-exists``)."""
    import os
    import shlex

    command = f"gankit run --resume {shlex.quote(str(Path(out_dir).absolute()))}"
    if os.environ.get("GANKIT_NPROC"):
        return f"{command} --nproc {os.environ['GANKIT_NPROC']}"
    if "LOCAL_RANK" in os.environ:
        return (f"torchrun <the same options> -m {command.replace('gankit', 'gan_kit', 1)}` on every node (or the "
                f"same torchrun command with `--resume-if-exists`")
    return command


def run_dir_problem(out_dir: Path, command: str = "gankit run RECIPE") -> str | None:
    """Why a fresh run may not start in ``out_dir`` (it already holds a run), else None. The
    advice names the commands that work: resuming when there is a checkpoint to resume from."""
    out_dir = Path(out_dir)
    existing = [name for name in RUN_FILES[:4] if (out_dir / name).exists()]
    if not existing:
        return None
    resume = (f"continue it with `gankit run --resume {out_dir}`, " if CheckpointLayout(out_dir).latest.is_file() else "")
    return (f"{out_dir}: already holds a run ({', '.join(existing)}); {resume}pick another folder with --out, "
            f"or replace it with `{command} --out {out_dir} --overwrite`")


def clear_run_dir(out_dir: Path) -> None:
    """Delete a previous run's files (``RUN_FILES``) from ``out_dir``; anything else stays."""
    for name in RUN_FILES:
        target = Path(out_dir) / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def write_recipe(run: Any) -> None:
    """``recipe.toml``: the resolved recipe, every default filled in (and every value a component
    resolves from the recipe: each component's ``resolved_options``), with the versions used and what
    this machine chose for ``run.device`` / ``run.precision`` = ``"auto"`` (a comment: the keys
    stay ``"auto"``, so a resume on another machine chooses again)."""
    versions = [f"torch {torch.__version__}", f"gankit {__version__}"]
    for source in sorted(set(run.plugins.sources.values())):
        if " " in source and not source.startswith("recipe plugin"):
            versions.append(source)
    header = "# resolved by gankit; versions: " + ", ".join(versions)
    chosen = [f'run.{key} = "auto" -> {value}' for key, value in
              (("device", run.device), ("precision", run.precision)) if getattr(run.recipe.run, key) == "auto"]
    if chosen:
        header += "\n# chosen on this machine: " + ", ".join(chosen)
    if getattr(run, "initialized_from", None) is not None:
        header += f"\n# G, D and G_ema started from the weights of {Path(run.initialized_from).absolute()} (--init-from)"
    run.out_dir.mkdir(parents=True, exist_ok=True)
    (run.out_dir / "recipe.toml").write_text(recipe_to_toml(run.recipe, header), encoding="utf-8")


def batch_problem(recipe: Recipe, phases: list[Phase], arch: Any, world_size: int) -> str | None:
    """Why the schedule's global batches do not suit ``world_size`` processes, else None: each
    must split evenly, and each process's share must suit the architecture
    (``Architecture.batch_problem``, e.g. PGGAN's minibatch-stddev group)."""
    for ph in phases:
        if ph.batch_size % world_size:
            return (f"{recipe.path}: growth.batch_size: {ph.batch_size} at {ph.resolution}px does not divide "
                    f"across {world_size} processes (use a multiple of {world_size})")
        msg = arch.batch_problem(ph.batch_size // world_size, world_size)
        if msg:
            where = (f"the per-process batch at {ph.resolution}px: {ph.batch_size} over {world_size} processes"
                     if world_size > 1 else f"the batch at {ph.resolution}px")
            return f"{recipe.path}: architecture: {msg} ({where})"
        per, b = ph.batch_size // world_size, ph.batch_gpu
        if b is not None and b < per:
            if per % b:
                fits = [d for d in range(1, per + 1) if per % d == 0 and d <= b]
                return (f"{recipe.path}: growth.batch_gpu: {b} at {ph.resolution}px does not divide the "
                        f"per-process batch {per} ({ph.batch_size} over {world_size} process"
                        f"{'es' if world_size > 1 else ''}); use a divisor of {per}, e.g. {fits[-1]}")
            # A round is one D forward: its minibatch-stddev groups must fit it (a round smaller
            # than the group shrinks the group to the round, as stylegan2-ada-pytorch's
            # mbstd_group = min(4, batch_gpu)).
            msg = arch.batch_problem(b, 1)
            if msg:
                return f"{recipe.path}: architecture: {msg} (a round of growth.batch_gpu = {b} at {ph.resolution}px)"
    return None


def preflight(recipe: Recipe, plugins: Any, world_size: int, *, check_run_dir: bool,
              resume: bool = False, check_lock: bool = False) -> None:
    """The checks ``gankit run --nproc N`` makes once, before starting N processes that would
    each report the same problem: the batches for N processes and (``check_run_dir``, a fresh
    run) whether the run directory is free, or (``resume``) whether it has a checkpoint, and
    (``check_lock``) that no other run is writing it. Builds the
    growth scheduler and the architecture component only (no networks, no data). Raises
    ``GankitError``."""
    def build(spec):
        comp = plugins.registry.get(spec.kind, spec.name)
        return comp.factory(spec.options, BuildContext(resolution=recipe.resolution, channels=0, recipe=recipe))

    total = int(round(recipe.run.total_kimg * 1000))
    problem = batch_problem(recipe, build(recipe.growth).phases(total), build(recipe.architecture), world_size)
    out_dir = Path(recipe.run.out_dir)
    if problem is None and check_lock:  # another run writing there (gan_kit.runs.lock)
        from gan_kit.runs.lock import lock_problem

        problem = lock_problem(out_dir)
    if problem is None and check_run_dir:
        problem = run_dir_problem(out_dir)
    if problem is None and resume and not CheckpointLayout(out_dir).latest.exists():
        problem = no_checkpoint_problem(out_dir)
    if problem:
        raise GankitError(problem)


def no_checkpoint_problem(out_dir: Path) -> str:
    """The line for ``--resume`` without a checkpoint: names the command that works."""
    path = CheckpointLayout(out_dir).latest
    if (Path(out_dir) / "recipe.toml").is_file():
        return (f"--resume: no checkpoint at {path} (the run stopped before its first one); start it again with "
                f"`gankit run {Path(out_dir) / 'recipe.toml'} --out {out_dir} --overwrite`")
    return f"--resume: no checkpoint at {path} (no run there); start one with `gankit run RECIPE --out {out_dir}`"
