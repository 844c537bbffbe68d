"""One-line user errors for every gankit command (each command module of ``gan_kit.cli`` wraps
its commands in ``user_errors``): ``GankitError`` prints as ``error: <line>`` per problem and
exits with its code (2); ``--debug`` (on the command or the group) or ``GANKIT_DEBUG=1`` shows
the traceback."""

from __future__ import annotations

import functools
import os
import sys

import click

from gan_kit.base.errors import GankitError, redact


def print_error(e: BaseException) -> None:
    from gan_kit.base.errors import Interrupted

    prefix = "stopped" if isinstance(e, Interrupted) else "error"  # an interrupt is no failure of the run
    if isinstance(e, Interrupted) and os.environ.get("RANK", "0") != "0":
        return  # every process stops on the same iteration with the same line: the first one says it
    for line in redact(str(e)).splitlines() or [type(e).__name__]:
        click.echo(f"{prefix}: {line}", err=True)


def user_errors(fn):
    """Add ``--debug`` and turn GankitError into one-line messages with exit code 2."""

    @click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
    @functools.wraps(fn)
    def wrapper(*args, debug: bool = False, **kwargs):
        ctx = click.get_current_context(silent=True)
        group_debug = bool(ctx and ctx.find_root().meta.get("gankit.debug"))
        debug = debug or group_debug or os.environ.get("GANKIT_DEBUG", "") not in ("", "0")
        try:
            return fn(*args, **kwargs)
        except GankitError as e:
            if debug:
                raise
            print_error(e)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except OSError as e:  # a path the command cannot write or read: the path and the cause, in one line
            if debug:
                raise
            where = e.filename if e.filename is not None else "a file"
            click.echo(redact(f"error: {where}: {e.strerror or type(e).__name__} (check the path and its permissions, "
                              f"or name another)"), err=True)
            sys.exit(2)
        except Exception as e:  # an unexpected failure: one line, the traceback with --debug
            if debug:
                raise
            click.echo(redact(f"error: {type(e).__name__}: {e} (run again with --debug for the traceback)"), err=True)
            sys.exit(1)

    return wrapper
