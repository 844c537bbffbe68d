"""``--truncation-normal T`` / ``--standing-stats N`` / ``--standing-batch B``: BigGAN's sampling
tricks (Brock et al. 2019) as click options, for every command that draws from a trained G
(``gankit generate``, ``sample``, ``eval``, ``export``): z from the normal truncated to [-T, T]
(sec. 3.1; ``gan_kit.tools.seeds.resample_beyond``) and G's BatchNorm statistics recomputed
from N batches of B latents (``gan_kit.tools.standing``)."""

from __future__ import annotations

import functools

import click
from click.core import ParameterSource

__all__ = ["trick_options"]


def trick_options(f):
    """The ``truncation_normal`` (float or None), ``standing_stats`` (int, 0 = none) and
    ``standing_batch`` (int) options of a command. ``--standing-batch`` given without
    ``--standing-stats`` is a usage error (it would do nothing)."""
    command = f

    @functools.wraps(command)
    def f(*args, **kwargs):
        source = click.get_current_context().get_parameter_source("standing_batch")
        if not kwargs.get("standing_stats") and source is ParameterSource.COMMANDLINE:
            raise click.UsageError("--standing-batch goes with --standing-stats N (how many batches); "
                                   "add --standing-stats or drop --standing-batch")
        return command(*args, **kwargs)

    f = click.option("--standing-batch", type=click.IntRange(2), default=64, show_default=True, metavar="B",
                     help="With --standing-stats: latents per batch.")(f)
    f = click.option("--standing-stats", type=click.IntRange(0), default=0, show_default=True, metavar="N",
                     help="Standing statistics (BigGAN; StudioGAN's -std_stat): recompute G's BatchNorm running "
                          "statistics from N batches of its own images first (seed 0, averaged); a G without "
                          "BatchNorm is refused.")(f)
    return click.option("--truncation-normal", "truncation_normal", type=float, default=None, metavar="T",
                        help="BigGAN's truncation trick: z drawn from the normal truncated to [-T, T] (entries beyond "
                             "T redrawn; e.g. 0.5; any architecture). Not StyleGAN's --truncation psi.")(f)
