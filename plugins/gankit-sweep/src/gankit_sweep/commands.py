"""The ``gankit sweep`` and ``gankit compare`` commands (``gankit_sweep`` runs them). Heavy
imports (torch, Optuna, scipy, matplotlib) happen inside the commands."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gan_kit import user_errors

__all__ = ["sweep", "compare"]

_PARAM_HELP = ("A recipe key and its values, e.g. update.name=[d-then-g,g-then-d,shared-fake], "
               "optim.lr=loguniform(1e-4,3e-3), loss.gp_weight=uniform(1,20), growth.batch_size=[{4=64,8=64,16=64},{4=32,8=32,16=32}], "
               "int(lo,hi); or a label and named bundles of keys that change together, e.g. "
               "'objective={hinge-gp={loss.name=\"hinge\"}, wgan-gp={loss.name=\"wgan-gp\", penalty=[]}}'. Repeat per key.")


@click.command("sweep")
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--param", "params", multiple=True, metavar="KEY=SPACE", help=_PARAM_HELP)
@click.option("--seeds", type=click.IntRange(1), default=1, show_default=True,
              help="Seeds per configuration (run.seed = 0 .. N-1); every one is a trial of its own and is kept. "
                   "With 1 (the default) compare shows no confidence interval: it needs 2 or more; 3-5 show "
                   "differences of the size GANs have.")
@click.option("--trials", type=click.IntRange(1), default=None,
              help="random / tpe: configurations to sample (each runs with every seed; default 10). The grid "
                   "runs every configuration.")
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="Trials at once on this machine, the CPU cores divided between them (run.threads).")
@click.option("--study", "study_name", default=None, metavar="NAME",
              help="Study name (default: <recipe name>-sweep). The same command again continues it.")
@click.option("--out", "folder", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Study folder: one run directory per trial, and the default storage (default: runs/<study>).")
@click.option("--storage", default=None, metavar="URL", envvar="GANKIT_STORAGE", show_envvar=True,
              help="Optuna storage shared by every process of the study: a journal file path, sqlite:///FILE.db, "
                   "or a database URL such as postgresql://USER@HOST/DB (psycopg2-binary or psycopg) or "
                   "mysql://USER@HOST/DB (pymysql or mysqlclient), the password in GANKIT_STORAGE_PASSWORD "
                   "(default: <study folder>/study.journal). See docs/sweeps.md, Many machines.")
@click.option("--sampler", type=click.Choice(["grid", "random", "tpe"]), default=None,
              help="How configurations are chosen (default: grid when every space is a list, named bundles or an "
                   "int(lo, hi) range; else tpe).")
@click.option("--pruner", type=click.Choice(["none", "median", "halving"]), default="none", show_default=True,
              help="Stop hopeless trials early on the objective metric's values during training (set the "
                   "metric's every_kimg): Optuna's MedianPruner or SuccessiveHalvingPruner.")
@click.option("--pruner-startup", type=click.IntRange(0), default=5, show_default=True,
              help="median: trials that must complete before any is pruned.")
@click.option("--pruner-warmup", type=click.IntRange(0), default=0, show_default=True,
              help="No trial is pruned before this tick (halving: its first rung).")
@click.option("--metric", default=None, metavar="NAME",
              help="Objective: a [[metric]] of the recipe by name, or a metrics.jsonl key (default: its first metric). "
                   "Its direction is the metric's higher_is_better.")
@click.option("--budget-kimg", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Length of every trial in kimg (sets run.total_kimg).")
@click.option("--budget-minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Wall-clock length of every trial in minutes of training (sets run.max_minutes).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value in every trial.")
@click.option("--retry-failed", is_flag=True, help="Run failed trials again (interrupted ones always continue).")
@click.option("--dry-run", is_flag=True, help="Check the space (and an existing study, as the run would), print the "
                                               "configurations and the trials left; no training.")
@user_errors
def sweep(recipe: Path, params, seeds, trials, jobs, study_name, folder, storage, sampler, pruner, pruner_startup,
          pruner_warmup, metric, budget_kimg, budget_minutes, overrides, retry_failed, dry_run) -> None:
    """Train RECIPE once per (configuration x seed) and let Optuna choose the configurations.

    Every trial is an ordinary run directory, <study folder>/<trial> (resumable, reportable,
    evaluable). Ctrl-C stops the running trials with a checkpoint; the same command continues the
    study. Several `gankit sweep` processes given one --storage share the study without running a
    trial twice. See docs/sweeps.md.
    """
    from gankit_sweep.setup import prepare

    plan = prepare(recipe=recipe, params=params, seeds=seeds, trials=trials, jobs=jobs, study_name=study_name,
                   folder=folder, storage=storage, sampler=sampler, pruner=pruner, pruner_startup=pruner_startup,
                   pruner_warmup=pruner_warmup, metric=metric, budget_kimg=budget_kimg,
                   budget_minutes=budget_minutes, overrides=overrides, retry_failed=retry_failed, dry_run=dry_run)
    if plan is None:
        return
    sys.exit(plan.run())


@click.command("compare")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--metric", default=None, metavar="NAME",
              help="The metric compared (a name or metrics.jsonl key; default: the sweep's objective, else the "
                   "runs' first metric).")
@click.option("--show", "extras", multiple=True, metavar="KEY",
              help="Also show the final value of this metrics.jsonl key (e.g. Augment/p); Augment/* are shown "
                   "when present. A key no run has is a warning.")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON instead of a table.")
@click.option("--out", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where compare.html goes (default: the study folder, else the working directory).")
@click.option("--no-html", is_flag=True, help="Do not write compare.html.")
@user_errors
def compare(paths, metric, extras, as_json, html_out, no_html) -> None:
    """Rank runs by a metric: per configuration (runs that differ only in run.seed) the mean and
    95% confidence interval over seeds, best and final values, kimg, training time and images/s,
    and Welch's t-test of each configuration against the best one.

    PATHS are run directories or folders of them (a sweep's study folder). Also writes
    compare.html: the metric over kimg and over training time per configuration (the band spans
    the seeds), the losses, and the final sample grids side by side.
    """
    from gankit_sweep.compare import compare_runs, print_table, to_json

    result = compare_runs(list(paths), metric=metric, extras=list(extras))
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        import json

        click.echo(json.dumps(to_json(result), indent=1))
    else:
        print_table(result)
    if not no_html:
        from gankit_sweep.page import write_page

        target = html_out or result.default_html
        note = write_page(result, target)
        click.echo(f"wrote {target}" + (f" ({note})" if note else ""), err=as_json)
