"""``gankit list-plugins`` (every registered component, with ``-v`` every option) and ``gankit
plugins`` (every loaded plugin, its version and hooks)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gan_kit.cli.errors import user_errors
from gan_kit.cli.group import warn_unknown_disabled
from gan_kit.base.errors import GankitError

__all__ = ["list_plugins", "plugins_command"]


def _option_rows(options_cls) -> list[dict]:
    """Every option of an Options class: name, type (TOML terms), default (None if required), help."""
    from gan_kit.base.options import describe_type, field_default, option_fields

    rows = []
    for f in option_fields(options_cls):
        default = field_default(f)
        rows.append({"name": f.name, "type": describe_type(f.type),
                     "default": default if default is not attrs.NOTHING else None,
                     "required": default is attrs.NOTHING,
                     "help": f.metadata.get("help", "")})
    return rows


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


@click.command("list-plugins")
@click.option("--kind", type=click.Choice(list(__import__("gan_kit.plugin_api.registry", fromlist=["KINDS"]).KINDS)),
              default=None, help="Only components of this kind.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option("-v", "--verbose", is_flag=True, help="Also print every option with type, default and help.")
@user_errors
def list_plugins(kind: str | None, as_json: bool, verbose: bool) -> None:
    """List every registered component and the plugin that registered it.

    Plugins that failed to import are listed too, marked broken, with their error.
    """
    from gan_kit.base.options import toml_value
    from gan_kit.plugin_api.manager import build_plugins

    plugins = build_plugins()
    comps = [c for c in plugins.registry if kind is None or c.kind == kind]
    if as_json:
        out = []
        for c in comps:
            item = {"kind": c.kind, "name": c.name, "plugin": c.plugin, "summary": c.summary, "broken": False}
            if verbose:
                item["options"] = _jsonable(_option_rows(c.Options))
            out.append(item)
        for b in plugins.broken:
            out.append({"kind": None, "name": b.name, "plugin": b.source, "summary": "", "broken": True,
                        "error": b.error})
        click.echo(json.dumps(out, indent=2))
        return
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title="gankit components")
    table.add_column("kind", no_wrap=True, min_width=6)
    table.add_column("name", no_wrap=True)
    table.add_column("plugin", no_wrap=True)
    table.add_column("summary", overflow="fold")  # wrapped, never cut mid-sentence
    for c in comps:
        table.add_row(c.kind, c.name, c.plugin, escape(c.summary))  # a docstring's [growth] is text, not markup
    for b in plugins.broken:
        dist, _, entry_point = b.source.partition(", ")
        table.add_row("[bold red]BROKEN[/]", b.name, dist, f"[red]{b.error}[/] ({entry_point})")
    console.print(table)
    if verbose:
        for c in comps:
            rows = _option_rows(c.Options)
            if not rows:
                continue
            t = Table("option", "type", "default", "help", title=f"{c.kind} {c.name}", title_justify="left")
            for row in rows:
                t.add_row(row["name"], row["type"], "(required)" if row["required"] else toml_value(row["default"]),
                          row["help"])
            console.print(t)
    for b in plugins.broken:
        click.echo(f"warning: {b}", err=True)


@click.command("plugins")
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--hook", "hook", default=None, metavar="NAME", help="Only plugins that implement this hook.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@user_errors
def plugins_command(recipe: Path | None, hook: str | None, as_json: bool) -> None:
    """List every loaded plugin - built-in, entry point, hook-only ones included - with its
    version and the hooks it implements; with RECIPE, also the plugins its `plugins = [...]`
    loads (and without those its `disable_plugins` switches off).

    A plugin's name is what GANKIT_DISABLE_PLUGINS (and a recipe's disable_plugins) take.
    """
    from gan_kit.plugin_api.manager import build_plugins
    from gan_kit.plugin_api.registry import suggest

    if recipe is not None:
        from gan_kit.recipe import load_recipe

        plugins = load_recipe(recipe)[1]
    else:
        plugins = build_plugins()
    infos = plugins.describe()
    if hook is not None:
        known = sorted({h for i in infos for h in i.hooks} | set(_hook_names()))
        if hook not in known:
            raise GankitError(f"--hook: unknown hook {hook!r}{suggest(hook, known)}; hooks: {', '.join(known)}")
        infos = [i for i in infos if hook in i.hooks]
    if as_json:
        out = [{"name": i.name, "version": i.version, "source": i.source, "hooks": list(i.hooks)} for i in infos]
        out += [{"name": b.name, "source": b.source, "hooks": [], "broken": b.error} for b in plugins.broken]
        click.echo(json.dumps(out, indent=2))
        return
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title="gankit plugins")
    table.add_column("plugin", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("hooks")
    for i in infos:
        table.add_row(i.name, i.version, ", ".join(i.hooks))
    for b in plugins.broken:
        table.add_row(f"[bold red]BROKEN[/] {b.name}", b.source, f"[red]{b.error}[/]")
    console.print(table)
    if plugins.disabled:
        click.echo(f"disabled: {', '.join(plugins.disabled)}")
    warn_unknown_disabled(plugins)


def _hook_names() -> list[str]:
    from gan_kit.plugin_api import hookspecs

    return sorted(n for n in dir(hookspecs) if getattr(getattr(hookspecs, n), "gankit_spec", None) is not None)
