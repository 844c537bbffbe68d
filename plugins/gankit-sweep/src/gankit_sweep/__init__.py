"""The gankit-sweep plugin: ``gankit sweep`` and ``gankit compare``, many runs of one recipe on Optuna, and their numbers
side by side with error bars over seeds.

A sweep drives ordinary runs: every trial is one (configuration, seed), trained by a ``gankit
run`` child process into its own run directory, and sweep and compare read runs through the files
users read (recipe.toml, metrics.jsonl, checkpoints, and the trial's sweep.json). One job per
module: ``spaces`` (``--param`` parsing and checking), ``storage`` (database URL forms, drivers,
the password kept out of printed lines, workers opening a new database at once), ``study`` (the
storage opened, study, queue, stale trials), ``procs`` (a recorded process's identity), ``spec``
(what a study remembers of its command, and the check of a later one), ``trials`` (a trial's child
process and files), ``driver`` (the loop), ``setup`` (the command line turned into a sweep),
``grouping`` (which runs are one configuration), ``compare`` (the statistics), ``page``
(compare.html); the click
commands are ``gankit_sweep.commands``, added to ``gankit`` through the ``register_commands`` hook
(entry point ``gankit: sweep``). It uses gankit's public API only (``from gan_kit import ...``).
"""

from __future__ import annotations

from gan_kit import hookimpl


@hookimpl
def register_commands(cli):
    # Optuna, scipy and the sweep modules load only when a sweep command runs: this module is
    # loaded with every gankit command (and every run's plugin manager).
    from gankit_sweep.commands import compare, sweep

    cli.add_command(sweep)
    cli.add_command(compare)

