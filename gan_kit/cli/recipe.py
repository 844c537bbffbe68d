"""``gankit recipe show`` (the resolved recipe as TOML) and ``gankit recipe check`` (every
problem, the data-dependent ones included)."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.cli.group import Group, warn_broken
from gan_kit.base.errors import GankitError
from gan_kit.base.version import __version__

__all__ = ["recipe"]


@click.group("recipe", cls=Group)
def recipe() -> None:
    """Inspect and check recipes."""


@recipe.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
@user_errors
def recipe_show(path: Path, overrides: tuple[str, ...]) -> None:
    """Print the resolved recipe as TOML: extends merged, --set applied, every default filled in.

    The output is a recipe itself: loading it gives the same recipe.
    """
    from gan_kit.recipe import load_recipe, recipe_to_toml

    r, plugins = load_recipe(path, list(overrides))
    warn_broken(plugins)
    click.echo(recipe_to_toml(r, f"# {path} resolved by gankit {__version__}"), nl=False)


@recipe.command("check")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
@user_errors
def recipe_check(path: Path, overrides: tuple[str, ...]) -> None:
    """Exit 0 if the recipe is valid, else print every problem and exit 2."""
    from gan_kit.recipe import load_recipe

    r, plugins = load_recipe(path, list(overrides))
    warn_broken(plugins)
    if r.metrics or r.architecture.slot.conditional:
        # What the data set decides (a metric asking for more images than it holds, a data set
        # below a metric's minimum, labels for a conditional run) is known only once it is built.
        from gan_kit.plugin_api.components import BuildContext
        from gan_kit.recipe.datachecks import labels_problem, metric_cap_note, metric_problem

        ctx = BuildContext(resolution=r.resolution, channels=0, recipe=r)
        data = plugins.registry.get("dataset", r.data.name).factory(r.data.options, ctx).build(r.resolution)
        problem = labels_problem(r, data)
        problems = [f"{path}: {problem}"] if problem else []
        for spec in r.metrics:
            metric = plugins.registry.get("metric", spec.name).factory(spec.options, ctx)
            problem = metric_problem(spec, metric, len(data), r.data.name)
            if problem:
                problems.append(f"{path}: {problem}")
            note = None if problem else metric_cap_note(spec, metric, len(data), r.data.name)
            if note:
                click.echo(note, err=True)
        if problems:
            raise GankitError("\n".join(problems))
    click.echo(f"{path}: ok")
