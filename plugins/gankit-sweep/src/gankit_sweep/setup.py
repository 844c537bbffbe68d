"""Setting up ``gankit sweep`` from its command line: the spaces checked against the recipe, the
objective metric and its direction, the sampler and pruner, the study and its queue - everything
that can be wrong is reported (one line each, exit code 2) before any trial trains."""

from __future__ import annotations

import inspect
import shlex
from pathlib import Path
from typing import Any

import click

from gan_kit import GankitError
from gankit_sweep import study as st
from gankit_sweep.driver import Objective, Settings, Sweep
from gankit_sweep.storage import serialised
from gankit_sweep.spaces import check_spaces, config_label, configurations, parse_spaces
from gankit_sweep.trials import child_command, threads_per_job

__all__ = ["prepare", "objective_of", "DEFAULT_TRIALS"]

#: Configurations random / TPE sample when --trials is not given.
DEFAULT_TRIALS = 10


def objective_of(recipe: Any, plugins: Any, metric: str | None) -> tuple[Objective, Any]:
    """``(Objective, metric spec)`` of ``--metric`` (default: the recipe's first ``[[metric]]``);
    the direction is the metric component's ``higher_is_better``."""
    from gan_kit import BuildContext

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

    from gan_kit import BuildContext
    from gan_kit import metric_problem

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
    with st.quiet():  # constant_liar: parallel workers do not all pick the same promising point
        return optuna.samplers.TPESampler(constant_liar=True)


def _pruner(kind: str, startup: int, warmup: int) -> Any:
    import optuna

    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup)
    if kind == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, warmup) if warmup else "auto")
    return optuna.pruners.NopPruner()


def _dotted(key: str) -> str:
    """``metric[0]`` -> ``metric.0``: a component's key as ``--set`` takes it."""
    import re

    return re.sub(r"\[(\d+)\]", r".\1", key)


def _names_of(configs: dict[int, dict] | list, seeds: int) -> list[str]:
    numbers = range(len(configs)) if isinstance(configs, list) else sorted(configs)
    return [st.trial_name(i, s) for i in numbers for s in range(seeds)]


def _listed(names: list[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def existing_study(storage: str | None, folder: Path, study_name: str, spec: dict, legacy_digest: Any,
                   configs: list | None, seeds: int, trials: int | None, retry_failed: bool) -> list[str]:
    """For ``--dry-run``: the study as the real run would find it, checked against ``spec`` as
    the real run checks it (``GankitError`` when it would be refused), in lines: new, or how
    many of its trials are finished and which remain. Creates nothing."""
    from gankit_sweep.driver import sampled_configs
    from gankit_sweep.spec import ATTR, check_spec

    store, where = st.open_storage(storage, folder, existing=True)
    study = st.find_study(store, study_name) if store is not None else None
    if study is None:
        return [f"study {study_name}: new, in {where}"]
    saved = study.user_attrs.get(ATTR)
    for w in check_spec(study_name, saved, spec, legacy_digest) if saved else []:
        click.echo(f"warning: {w}", err=True)
    states = st.name_states(study)
    sampled = sampled_configs(study) if configs is None else {}
    expected = _names_of(configs if configs is not None else sampled, seeds)
    done = [n for n in expected if states.get(n) in ("complete", "pruned")]
    failed = [n for n in expected if states.get(n) == "failed"]
    running = [n for n in expected if states.get(n) == "running"]
    left = [n for n in expected if n not in done and n not in running and (retry_failed or n not in failed)]
    counts = ", ".join(f"{sum(states.get(n) == k for n in done)} {k}" for k in ("complete", "pruned")
                       if any(states.get(n) == k for n in done))
    lines = [f"study {study_name} exists in {where}: {len(done)} of {len(expected)} trials finished"
             + (f" ({counts})" if counts else "")]
    if configs is None:
        lines[0] += f"; {len(sampled)} of {trials} configurations sampled so far"
    if running:
        lines.append(f"  running in another process: {_listed(running)}")
    if failed and not retry_failed:
        lines.append(f"  failed, not run again (add --retry-failed to): {_listed(failed)}")
    to_sample = max(0, (trials or 0) - len(sampled)) if configs is None else 0
    rest = [_listed(left)] if left else []
    if to_sample:
        rest.append(f"{to_sample} configuration(s) still to sample, each with {seeds} seed(s)")
    lines.append(f"  to run: {'; '.join(rest)}" if rest else "  nothing left to run")
    return lines


def prepare(*, recipe: Path, params, seeds: int, trials: int | None, jobs: int, study_name: str | None,
            folder: Path | None, storage: str | None, sampler: str | None, pruner: str, pruner_startup: int,
            pruner_warmup: int, metric: str | None, budget_kimg: float | None, budget_minutes: float | None,
            overrides, retry_failed: bool, dry_run: bool) -> Sweep | None:
    """Check everything, open the study and queue its trials; returns the ``Sweep`` to run (None
    after ``dry_run``, which prints the plan instead)."""
    from gan_kit import load_recipe, read_table, recipe_to_toml
    from gankit_sweep.spec import study_spec

    owned, sets = {}, list(overrides)
    if budget_kimg is not None:
        owned["run.total_kimg"] = "--budget-kimg sets it; drop one of them"
        sets.append(f"run.total_kimg={budget_kimg!r}")
    if budget_minutes is not None:
        owned["run.max_minutes"] = "--budget-minutes sets it; drop one of them"
        sets.append(f"run.max_minutes={budget_minutes!r}")
    for s in overrides:
        key = s.partition("=")[0].strip()
        if key in owned or key in ("run.seed", "run.out_dir"):
            fix = owned.get(key) or ("use --seeds N" if key == "run.seed" else "choose the study folder with --out")
            raise GankitError(f"--set {s!r}: {key} is set by the sweep: {fix}")
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
    shown_threads = (base.run.threads or "auto") if user_threads else threads
    n_configs = len(configs) if configs is not None else trials
    what = (f"{n_configs} configuration{'s' * (n_configs != 1)} x {seeds} seed{'s' * (seeds != 1)} = "
            f"{n_configs * seeds} trial{'s' * (n_configs * seeds != 1)} ({sampler}), "
            f"objective {objective.key} ({'higher' if objective.higher_is_better else 'lower'} is better)")
    if seeds == 1:
        what += "; 1 seed: no interval (compare needs --seeds 2 or more)"
    if pruner != "none" and spec.slot.every_kimg is None:
        key = _dotted(spec.key)
        click.echo(f"warning: {key}.every_kimg is not set, so {spec.name} is computed only at the end of each "
                   f"trial and --pruner {pruner} cannot stop one early (e.g. --set {key}.every_kimg=4)", err=True)
    spec_attrs = study_spec(recipe=recipe, table=read_table(recipe), params=params, overrides=overrides,
                            budget_kimg=budget_kimg, budget_minutes=budget_minutes, metric=objective.key,
                            sampler=sampler)

    def legacy_digest() -> str:  # what a study started by an older gankit recorded
        return st.recipe_digest(recipe_to_toml(base))

    if dry_run:
        found = existing_study(storage, folder, study_name, spec_attrs, legacy_digest, configs, seeds, trials,
                               retry_failed)
        click.echo(f"{recipe}: ok; {what}")
        for i, c in enumerate(configs or []):
            click.echo(f"  {st.trial_name(i, 0)[:-3]}: {config_label(c)}")
        if configs is None:
            for sp in spaces:
                click.echo(f"  {sp.text}")
        for line in found:
            click.echo(line)
        first = configs[0] if configs else {sp.key: sp.probes()[0] for sp in spaces}
        items = [*sets, *(x for sp in spaces for x in sp.sets(first[sp.key])), "run.seed=0"]
        cmd = child_command(recipe, folder / st.trial_name(0, 0), items, resume=False, overwrite=False, threads=threads)
        click.echo("first trial: gankit " + " ".join(shlex.quote(c) for c in cmd[3:]))
        return None
    # Every worker of a SLURM array may get here at the same moment on a new database: they
    # create its tables, the study and the grid's queue one at a time.
    with serialised(storage, folder, st.journal_path(storage, folder)):
        store, where = st.open_storage(storage, folder)
        study, warnings = st.open_study(store, study_name, objective.direction, _sampler(sampler, spaces),
                                        _pruner(pruner, pruner_startup, pruner_warmup), spec_attrs, legacy_digest)
        if configs is not None:
            st.enqueue_grid(study, configs, seeds, folder)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"study {study_name}: {what}; {jobs} at once x {shown_threads} thread(s); storage {where}; "
               f"run directories {folder}/<trial>")
    settings = Settings(recipe=recipe, spaces=spaces, sets=sets, seeds=seeds, trials=trials, jobs=jobs,
                        threads=threads, sampler=sampler, folder=folder, study_name=study_name, objective=objective,
                        pruning=pruner != "none", retry_failed=retry_failed)
    return Sweep(settings, study, store)
