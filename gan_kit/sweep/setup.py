"""Setting up ``gankit sweep`` from its command line: the spaces checked against the recipe, the
objective metric and its direction, the sampler and pruner, the study and its queue - everything
that can be wrong is reported (one line each, exit code 2) before any trial trains."""

from __future__ import annotations

import inspect
import shlex
from pathlib import Path
from typing import Any

import click

from gan_kit.errors import GankitError
from gan_kit.sweep import study as st
from gan_kit.sweep.driver import Objective, Settings, Sweep
from gan_kit.sweep.spaces import check_spaces, config_label, configurations, parse_spaces
from gan_kit.sweep.trials import child_command, threads_per_job

__all__ = ["prepare", "objective_of", "DEFAULT_TRIALS"]

#: Configurations random / TPE sample when --trials is not given.
DEFAULT_TRIALS = 10


def objective_of(recipe: Any, plugins: Any, metric: str | None) -> tuple[Objective, Any]:
    """``(Objective, metric spec)`` of ``--metric`` (default: the recipe's first ``[[metric]]``);
    the direction is the metric component's ``higher_is_better``."""
    from gan_kit.components import BuildContext

    if not recipe.metrics:
        raise GankitError(f"{recipe.path}: the recipe has no [[metric]], and a sweep needs one as its objective (add "
                          f"[[metric]] name = \"swd\" to the recipe, or --set 'metric=[{{name = \"swd\"}}]')")
    if metric is None:
        spec, key = recipe.metrics[0], f"Metrics/{recipe.metrics[0].name}"
    else:
        key = metric if metric.startswith("Metrics/") else f"Metrics/{metric}"
        name = key.split("/")[1] if key.count("/") >= 1 else ""
        spec = next((s for s in recipe.metrics if s.name == name), None)
        if spec is None:
            raise GankitError(f"--metric {metric}: the recipe computes no metric {name!r} (its metrics: "
                              f"{', '.join(s.name for s in recipe.metrics)})")
    comp = plugins.registry.get("metric", spec.name)
    hib = inspect.getattr_static(comp.factory, "higher_is_better", False)
    if isinstance(hib, property):  # a metric whose direction is an option: ask a built one
        ctx = BuildContext(resolution=recipe.resolution, channels=0, recipe=recipe)
        hib = comp.factory(spec.options, ctx).higher_is_better
    return Objective(key, bool(hib)), spec


def data_checker(plugins: Any):
    """``check(recipe) -> problem | None``: what only the built data set tells (as `gankit recipe
    check` does): a metric asking for more images than the data set holds. One build per distinct
    ``[data]`` table."""
    import json

    from gan_kit.components import BuildContext
    from gan_kit.datachecks import metric_problem

    sizes: dict[str, int | str] = {}

    def check(recipe: Any) -> str | None:
        if not recipe.metrics:
            return None
        key = json.dumps(recipe.raw.get("data", {}), sort_keys=True, default=str)
        ctx = BuildContext(resolution=recipe.resolution, channels=0, recipe=recipe)
        if key not in sizes:
            try:
                factory = plugins.registry.get("dataset", recipe.data.name).factory
                sizes[key] = len(factory(recipe.data.options, ctx).build(recipe.resolution))
            except GankitError as e:
                sizes[key] = f"{recipe.path}: data: {str(e).splitlines()[0]}"
        if isinstance(sizes[key], str):
            return sizes[key]
        for spec in recipe.metrics:
            metric = plugins.registry.get("metric", spec.name).factory(spec.options, ctx)
            problem = metric_problem(spec, metric, sizes[key], recipe.data.name)
            if problem:
                return f"{recipe.path}: {problem}"
        return None

    return check


def _sampler(kind: str, spaces) -> Any:
    import optuna

    if kind == "grid":
        # The grid is Optuna's trial queue: every (configuration x seed) enqueued once, and the
        # sampler is never asked. GridSampler visits each point once (no seeds), and its own
        # bookkeeping stops the study at the end of a grid, which ask-and-tell has no loop for.
        return optuna.samplers.RandomSampler(seed=0)
    if kind == "random":
        return optuna.samplers.RandomSampler()
    with st._quiet():  # constant_liar: parallel workers do not all pick the same promising point
        return optuna.samplers.TPESampler(constant_liar=True)


def _pruner(kind: str, startup: int, warmup: int) -> Any:
    import optuna

    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup)
    if kind == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, warmup) if warmup else "auto")
    return optuna.pruners.NopPruner()


def prepare(*, recipe: Path, params, seeds: int, trials: int | None, jobs: int, study_name: str | None,
            folder: Path | None, storage: str | None, sampler: str | None, pruner: str, pruner_startup: int,
            pruner_warmup: int, metric: str | None, budget_kimg: float | None, budget_minutes: float | None,
            overrides, retry_failed: bool, dry_run: bool) -> Sweep | None:
    """Check everything, open the study and queue its trials; returns the ``Sweep`` to run (None
    after ``dry_run``, which prints the plan instead)."""
    from gan_kit.recipe import load_recipe, recipe_to_toml

    owned, sets = {}, list(overrides)
    if budget_kimg is not None:
        owned["run.total_kimg"] = "--budget-kimg sets it (drop one of them)"
        sets.append(f"run.total_kimg={budget_kimg!r}")
    if budget_minutes is not None:
        owned["run.max_minutes"] = "--budget-minutes sets it (drop one of them)"
        sets.append(f"run.max_minutes={budget_minutes!r}")
    for s in overrides:
        key = s.partition("=")[0].strip()
        if key in owned or key in ("run.seed", "run.out_dir"):
            fix = owned.get(key) or ("use --seeds N" if key == "run.seed" else "choose the study folder with --out")
            raise GankitError(f"--set {s!r}: {key} is set by the sweep ({fix})")
    spaces = parse_spaces(params, overrides, owned)
    base, plugins = load_recipe(recipe, sets)
    check_spaces(recipe, spaces, sets, plugins, extra=data_checker(plugins))
    objective, spec = objective_of(base, plugins, metric)
    discrete = all(sp.kind in ("choice", "bundle") or (sp.kind == "int" and not sp.log) for sp in spaces)
    sampler = sampler or ("grid" if discrete else "tpe")
    configs = configurations(spaces) if sampler == "grid" else None
    if sampler == "grid" and trials is not None:
        raise GankitError(f"--trials {trials}: the grid runs every one of its {len(configs)} configurations; "
                          f"--trials is for --sampler random or tpe")
    trials = None if sampler == "grid" else (trials or DEFAULT_TRIALS)
    study_name = study_name or f"{recipe.stem}-sweep"
    folder = folder or Path("runs") / study_name
    user_threads = any(s.partition("=")[0].strip() == "run.threads" for s in overrides)
    threads = None if user_threads else threads_per_job(jobs)
    n_configs = len(configs) if configs is not None else trials
    what = (f"{n_configs} configuration{'s' * (n_configs != 1)} x {seeds} seed{'s' * (seeds != 1)} = "
            f"{n_configs * seeds} trial{'s' * (n_configs * seeds != 1)} ({sampler}), "
            f"objective {objective.key} ({'higher' if objective.higher_is_better else 'lower'} is better)")
    if dry_run:
        click.echo(f"{recipe}: ok; {what}")
        for i, c in enumerate(configs or []):
            click.echo(f"  {st.trial_name(i, 0)[:-3]}: {config_label(c)}")
        if configs is None:
            for sp in spaces:
                click.echo(f"  {sp.text}")
        first = configs[0] if configs else {sp.key: sp.probes()[0] for sp in spaces}
        items = [*sets, *(x for sp in spaces for x in sp.sets(first[sp.key])), "run.seed=0"]
        cmd = child_command(recipe, folder / st.trial_name(0, 0), items, resume=False, overwrite=False, threads=threads)
        click.echo("first trial: gankit " + " ".join(shlex.quote(c) for c in cmd[3:]))
        return None
    if pruner != "none" and spec.slot.every_kimg is None:
        click.echo(f"warning: {spec.key}.every_kimg is not set, so {spec.name} is computed only at the end of each "
                   f"trial and --pruner {pruner} cannot stop one early (e.g. --set {spec.key}.every_kimg=4)", err=True)
    store, where = st.open_storage(storage, folder)
    spec_attrs = {"recipe": str(recipe), "recipe_digest": st.recipe_digest(recipe_to_toml(base)), "params": list(params),
                  "sets": sets, "metric": objective.key, "sampler": sampler}
    study = st.open_study(store, study_name, objective.direction, _sampler(sampler, spaces),
                          _pruner(pruner, pruner_startup, pruner_warmup), spec_attrs)
    if configs is not None:
        st.enqueue_grid(study, configs, seeds, folder)
    click.echo(f"study {study_name}: {what}; {jobs} at once x {threads or 'run.threads'} thread(s); storage {where}; "
               f"run directories {folder}/<trial>")
    settings = Settings(recipe=recipe, spaces=spaces, sets=sets, seeds=seeds, trials=trials, jobs=jobs,
                        threads=threads, sampler=sampler, folder=folder, study_name=study_name, objective=objective,
                        pruning=pruner != "none", retry_failed=retry_failed)
    return Sweep(settings, study, store)
