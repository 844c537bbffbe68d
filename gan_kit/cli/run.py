"""``gankit run``: train a recipe, continue a run (``--resume``), start from another run's
weights (``--init-from``), print the plan (``--dry-run``), or start N processes (``--nproc``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from gan_kit.cli.errors import user_errors
from gan_kit.cli.group import warn_broken
from gan_kit.base.errors import GankitError

__all__ = ["run"]


@click.command("run")
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory (default: run.out_dir of the recipe).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a recipe value, e.g. --set run.total_kimg=2 --set loss.name=bce.")
@click.option("--resume", "resume", is_flag=False, flag_value="", default=None, metavar="[RUN_DIR|CHECKPOINT]",
              help="Continue a run exactly from its checkpoints/latest.pt (or the checkpoint file given), with "
                   "the recipe saved in it: `--resume runs/x` needs nothing else; with RECIPE, its run directory "
                   "(or --out). A RECIPE or --set may change what can change mid-run (lr, betas, penalty weights, "
                   "EMA, intervals, total_kimg).")
@click.option("--init-from", "init_from", default=None, metavar="CHECKPOINT",
              help="Start this new run from another run's G, D and G_ema weights (a checkpoint file, or a run "
                   "directory for its latest.pt, an export folder, a network-snapshot .pkl of another codebase, "
                   "hf://OWNER/REPO/FILE): fine-tuning on other data; optimizers and counters start fresh. The "
                   "architecture, its options and data.resolution must match the checkpoint's (gankit import "
                   "writes a recipe that does).")
@click.option("--overwrite", is_flag=True, help="Replace a run already in the run directory (its metrics, "
                                                "samples and checkpoints are deleted).")
@click.option("--dry-run", is_flag=True, help="Check the recipe, build every component, print the plan "
                                              "(with --resume: the resume point and the recipe changes); no training.")
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help="Start N processes through torchrun (one per GPU).")
@click.option("--resume-if-exists", "resume_if_exists", is_flag=True,
              help="Continue the run directory's run from its checkpoints/latest.pt when it has one (the recipe "
                   "must be one it may resume with), else start RECIPE there: one command for a job that a "
                   "scheduler or torchrun --max-restarts may start again. A worker torchrun restarted "
                   "(TORCHELASTIC_RESTART_COUNT > 0) does this without the flag.")
@user_errors
def run(recipe: Path | None, out_dir: Path | None, overrides: tuple[str, ...], resume: str | None,
        init_from: str | None, overwrite: bool, dry_run: bool, nproc: int | None, resume_if_exists: bool) -> None:
    """Train the GAN described by RECIPE (or continue the run in RUN_DIR with --resume)."""
    from gan_kit.runs.engine import preflight
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train
    from gan_kit.runs.launch import continue_or_start, load_for_run, prepare_run, restarted, resume_source
    from gan_kit.runs.resume import finished_problem

    if resume is not None and resume_if_exists:
        raise GankitError("--resume and --resume-if-exists overlap: --resume continues a run that must exist, "
                          "--resume-if-exists continues one if it exists, else starts RECIPE (choose one)")
    # torchrun started this worker again (--max-restarts, a lost node): continue the run it was
    # training, whatever the first start said (--overwrite or --init-from would undo its progress).
    elastic_restart = resume is None and restarted() and recipe is not None
    if (resume_if_exists or elastic_restart) and not dry_run:
        resume, again = continue_or_start(recipe, out_dir, overrides)
        if resume is not None or elastic_restart:
            overwrite, init_from = again, None if resume is not None else init_from
        else:
            overwrite = overwrite or again
    resuming = resume is not None
    if resuming and overwrite:
        raise GankitError("--resume and --overwrite contradict each other: --resume continues the run, "
                          "--overwrite deletes it (choose one)")
    if resuming and init_from is not None:
        raise GankitError("--resume and --init-from contradict each other: --resume continues a run with its "
                          "optimizers and counters, --init-from starts a new one from its weights (choose one)")
    launcher = nproc is not None and nproc > 1 and "LOCAL_RANK" not in os.environ
    if launcher and not dry_run:
        # Problems every process would hit are reported here, once, before torchrun starts.
        source = resume_source(resume, out_dir) if resuming else None
        r, plugins, _ = load_for_run(recipe, out_dir, overrides, resume)
        preflight(r, plugins, nproc, check_run_dir=not (resuming or overwrite), resume=resuming and source is None,
                  check_lock=True)
        if init_from is not None:
            from gan_kit.runs.resume import check_init_from

            check_init_from(init_from, r)
        from gan_kit.training.distributed import launch

        sys.exit(launch(nproc, sys.argv[1:], timeout_s=r.run.dist_timeout_minutes * 60))

    distributed = None
    clean = False
    try:
        # The recipe first (files only; the checkpoint read once): it says how long the
        # process-group set-up may wait.
        r, plugins, point = prepare_run(recipe, out_dir, overrides, resume)
        if (point is not None and (resume_if_exists or elastic_restart)
                and finished_problem(int(point.state.get("cur_nimg", 0)), float(point.state.get("train_seconds", 0.0)), r)):
            # The one command every start runs (a requeued job, a torchrun restart after the final
            # checkpoint) ends a finished run as a success instead of refusing to train further.
            print(f"done: {r.run.out_dir} has finished its run (kimg {point.state['cur_nimg'] / 1000:g}); nothing to "
                  f"train (raise run.total_kimg or run.max_minutes with --resume to extend it)", file=sys.stderr)
            clean = True
            return
        if "LOCAL_RANK" in os.environ:
            from gan_kit.training import distributed

            distributed.init(timeout_s=r.run.dist_timeout_minutes * 60)
            # Every process must have decided alike (continue or start): they read one run
            # directory, which several nodes see only on a shared file system.
            distributed.check_same_decision((resume, overwrite), r.run.out_dir)
        warn_broken(plugins)
        the_run = build_run(r, plugins)
        if init_from is not None:
            from gan_kit.runs.resume import init_from as load_weights

            load_weights(the_run, init_from)
        if dry_run:
            if launcher:  # planned here, once; still check the batches for nproc processes
                preflight(r, plugins, nproc, check_run_dir=False)
            _print_plan(the_run, point, processes=nproc if launcher else the_run.world_size)
            clean = True
            return
        train(the_run, resume=point if point is not None else resuming, overwrite=overwrite)
        clean = True
    finally:
        if distributed is not None:
            the_run = None  # noqa: F841 - its DDP wrappers must go before the process group
            distributed.shutdown(clean=clean)


def _print_plan(run, point=None, processes: int = 1) -> None:
    """The plan of a run (``--dry-run``) trained by ``processes`` processes; with the resume
    point of ``--resume``, where it continues and the recipe changes."""
    from gan_kit.tools.plan import parameter_count, phase_plan

    console = Console(soft_wrap=True)  # long paths stay on one line (logs, pipes)
    r = run.recipe
    console.print(f"recipe {r.path}: ok")
    console.print(f"device {run.device} ({run.precision}); data {r.data.name}: {len(run.dataset)} images "
                  f"{run.channels}x{r.resolution}x{r.resolution}")
    console.print(f"G {r.architecture.name}: {parameter_count(run.G)}; D: {parameter_count(run.D)}")
    console.print(f"loss {r.loss.name}; penalties {', '.join(f'{p.name} x{p.weight:g}' for p in run.penalties) or 'none'}; "
                  f"update {r.update.name}; init {r.init.name}")
    several = processes > 1
    table = Table("phase", "resolution", "starts at kimg", "fade kimg", "batch", *(["per process"] if several else []),
                  "batch_gpu", "rounds / step", "lr scale")
    for ph in phase_plan(run.phases(), processes):
        table.add_row(str(ph.index), f"{ph.resolution}px", f"{ph.start_kimg:g}", f"{ph.fade_kimg:g}",
                      str(ph.batch_size), *([str(ph.per_process)] if several else []),
                      "none" if ph.batch_gpu is None else str(ph.batch_gpu), str(ph.rounds), f"{ph.lr_scale:g}")
    # As wide as its cells (a log or a pipe is 80 columns to rich, which would cut values short).
    needed = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    Console(soft_wrap=True, width=max(console.width, needed)).print(table)
    if point is not None:
        checkpoint, state, changes = point.checkpoint, point.state, point.changes
        console.print(f"resume from {checkpoint} at kimg {state['cur_nimg'] / 1000:g} "
                      f"(step {state['step']}, tick {state['tick']})")
        console.print("recipe changes: " + ("; ".join(changes) if changes else "none"))
    if run.initialized_from is not None:
        nets = run.initialized_networks or ("G", "D", "G_ema")
        fresh = [n for n in ("G", "D", "G_ema") if n not in nets]
        console.print(f"{', '.join(nets)} start from the weights of {run.initialized_from}"
                      + (f"; {' and '.join(fresh)} start{'s' if len(fresh) == 1 else ''} fresh (the source holds "
                         f"none)" if fresh else ""))
    limit = r.run.max_minutes
    until = f" or {limit:g} minutes of training, whichever comes first" if limit else ""
    console.print(f"total {run.total_nimg / 1000:g} kimg{until} -> {run.out_dir}")
