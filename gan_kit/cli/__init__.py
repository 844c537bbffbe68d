"""The ``gankit`` command line (click + rich): the top layer, click commands only.

One module per command family: ``group`` (the ``gankit`` group, ``--version``, ``--debug``),
``run``, ``plugins`` (list-plugins, plugins), ``recipe`` (recipe show / check), ``sample``,
``generate``, ``stylemix`` (style-mix), ``project``, ``evaluate`` (eval), ``export``, ``report`` and ``bench`` (``gankit sweep`` / ``compare`` come from the
gankit-sweep plugin, through ``register_commands``); the work itself is
done by the modules below (``gan_kit.runs.engine``, ``gan_kit.tools.evaluate``, ...).

Every user error (``GankitError``: recipe problems, plugin problems, bad checkpoints) prints as
plain lines on stderr and exits with code 2; ``--debug`` shows the traceback instead
(``gan_kit.cli.errors``).
"""

from __future__ import annotations

import sys

from gan_kit.cli import (bench, evaluate, export, generate, importing, plugins, project, recipe, report, run, sample,
                         stylemix)
from gan_kit.cli.group import cli
from gan_kit.base.errors import GankitError

__all__ = ["cli", "main"]

for _command in (run.run, plugins.list_plugins, plugins.plugins_command, recipe.recipe, sample.sample,
                 generate.generate, stylemix.style_mix, project.project_command, evaluate.eval_command, report.report,
                 bench.bench_entry, export.export, importing.import_command):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point: add plugin commands, then run the click group.

    If the plugins cannot be built (a duplicate component, a misspelled hook), their commands are
    skipped here and every command that needs the plugins reports the error itself, so
    ``--help`` and ``--version`` keep working.
    """
    try:
        from gan_kit.plugin_api.manager import build_plugins

        build_plugins().hook.register_commands(cli=cli)
    except GankitError:
        if "--debug" in sys.argv:
            raise
    cli(prog_name="gankit")
