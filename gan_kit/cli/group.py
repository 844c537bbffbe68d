"""The ``gankit`` click group: its options (``--version``, ``--debug``), the command list that
shows each command's whole first sentence, and the warnings every command that builds the
plugins prints."""

from __future__ import annotations

import os
import sys

import click

from gan_kit.base.version import __version__
from gan_kit.cli.errors import UsageLine

__all__ = ["Group", "cli", "warn_broken", "warn_unknown_disabled"]


class Group(click.Group):
    """A click group whose command list shows each command's whole first sentence, wrapped,
    where click cuts it at the terminal width with '...' (plugin commands included)."""

    group_class = type  # `@cli.group()` sub-groups list their commands the same way (and `cls=Group` ones)

    # Click's own usage errors (a value of the wrong type or range, a missing or unknown option)
    # in gankit's one-line form, exit code 2, like every other error; --debug keeps click's text
    # and the traceback. The group's parse and every sub-command's (made inside invoke) pass here.
    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise _one_line(e, None) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _one_line(e, ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, cmd.get_short_help_str(limit=10_000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=lambda c, p, v: _version(c, v),
              help="Show the versions of gankit, torch and Python, and exit.")
@click.option("--debug", is_flag=True, help="Show full tracebacks for every command.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Train GANs from a TOML recipe. Every component is a plugin: see `gankit list-plugins`.

    Errors print as one line each (`<file>: <key>: <what> (<fix>)`) and exit with code 2;
    --debug (or GANKIT_DEBUG=1) shows the traceback instead.
    """
    ctx.meta["gankit.debug"] = debug


def _one_line(e: click.UsageError, ctx: click.Context | None) -> click.UsageError:
    debug = (bool(ctx and ctx.params.get("debug")) or "--debug" in sys.argv[1:]
             or os.environ.get("GANKIT_DEBUG", "") not in ("", "0"))
    return e if debug or isinstance(e, UsageLine) else UsageLine(e)


def _version(ctx: click.Context, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import platform

    import torch

    click.echo(f"gankit {__version__} (torch {torch.__version__}, Python {platform.python_version()})")
    ctx.exit()


def warn_broken(plugins) -> None:
    for b in plugins.broken:
        click.echo(f"warning: {b} (gankit list-plugins marks it; fix or uninstall it)", err=True)
    warn_unknown_disabled(plugins)


def warn_unknown_disabled(plugins) -> None:
    for name in plugins.unknown_disabled:
        click.echo(f"warning: GANKIT_DISABLE_PLUGINS / disable_plugins names {name!r}, which matches no plugin "
                   f"(`gankit plugins` lists their names)", err=True)
