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
            from gan_kit.base.errors import clip

            reason = e.strerror or clip(str(e)) or type(e).__name__
            where = f"{e.filename}: " if e.filename is not None else ""  # never "a file": the reason names what it can
            click.echo(redact(f"error: {where}{reason} (check the path and its permissions, or name another)"), err=True)
            sys.exit(2)
        except Exception as e:  # an unexpected failure: one line, the traceback with --debug
            if debug:
                raise
            click.echo(redact(f"error: {type(e).__name__}: {e} (run again with --debug for the traceback)"), err=True)
            sys.exit(1)

    return wrapper


def _name(param, ctx) -> str:
    if isinstance(param, click.Option):
        long = [o for o in param.opts if o.startswith("--")]
        return (long or param.opts)[0]
    if param is not None:
        return param.human_readable_name
    return ctx.command_path if ctx is not None else "gankit"


def _fix(param) -> str:
    """What to give instead, from the parameter's type (``""`` when the type says nothing more)."""
    t = getattr(param, "type", None)
    if isinstance(t, (click.IntRange, click.FloatRange)):
        what = "a whole number" if isinstance(t, click.IntRange) else "a number"
        low = None if t.min is None else f"{'above' if t.min_open else 'of at least'} {t.min}"
        high = None if t.max is None else f"{'below' if t.max_open else 'at most'} {t.max}"
        return f"give {what} {' and '.join(b for b in (low, high) if b)}; "
    if t is click.INT:
        return "give a whole number; "
    if t is click.FLOAT:
        return "give a number; "
    if isinstance(t, click.Choice):
        return f"choose one of {', '.join(map(str, t.choices))}; "
    return ""


def usage_line(e: click.UsageError) -> str:
    """Click's own usage error (a value of the wrong type or range, a missing or unknown option,
    an extra argument) as gankit's one line: ``<option>: <what is wrong> (<fix>; see `<command>
    --help`)``."""
    ctx = e.ctx
    command = ctx.command_path if ctx is not None else "gankit"
    see = f"see `{command} --help`"
    if isinstance(e, click.NoSuchOption):
        guess = f"did you mean {' or '.join(sorted(e.possibilities))}? " if e.possibilities else ""
        return f"{e.option_name}: `{command}` has no such option ({guess}{see})"
    if isinstance(e, click.MissingParameter):
        name = _name(e.param, ctx)
        example = f"{name} VALUE" if isinstance(e.param, click.Option) else name
        return f"{name}: missing; `{command}` needs it ({'give ' + example + '; ' if example else ''}{see})"
    if isinstance(e, click.BadParameter):
        name = _name(e.param, ctx) if e.param is not None else (e.param_hint or command)
        if isinstance(name, (list, tuple)):
            name = " / ".join(name)
        return f"{name}: {e.message.rstrip('.')} ({_fix(e.param)}{see})"
    if isinstance(e, click.BadOptionUsage):
        return f"{e.option_name}: {e.message.rstrip('.')} ({see})"
    return f"{command}: {_lower(e.message.rstrip('.'))} ({see})"


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:] if text[1:2].islower() else text  # "No such command" -> "no such command"


class UsageLine(click.UsageError):
    """A click usage error shown as gankit's one line (``usage_line``), exit code 2, without
    click's usage block."""

    def __init__(self, error: click.UsageError):
        super().__init__(usage_line(error), error.ctx)

    def show(self, file=None) -> None:
        click.echo(redact(f"error: {self.message}"), err=True)
