"""Example gankit plugin: a schedule shape (kind ``schedule``), written next to any schedulable
option of a recipe.

``restarts``: cosine annealing with warm restarts (SGDR, Loshchilov & Hutter 2017, eq. 5): each
period of ``period_kimg`` falls from ``start`` to ``end`` along half a cosine, then jumps back to
``start``; every period is ``period_mult`` times longer than the one before.

A schedule is a pure function of the real images shown and the run's planned length - no state,
no randomness, no tensor - so a resumed run (which knows only ``cur_nimg``) and every process of
a ``--nproc`` run compute the same float as one uninterrupted process.

Use it::

    plugins = ["schedule_plugin.py"]
    [optim]
    lr = { schedule = "restarts", start = 0.002, end = 0.0002, period_kimg = 20 }
"""

from __future__ import annotations

import math

import attrs

from gan_kit import Schedule, hookimpl, option


class Restarts(Schedule):
    """Cosine annealing from ``start`` to ``end`` in periods of ``period_kimg`` (growing by
    ``period_mult``), restarting at ``start`` after each (SGDR)."""

    @attrs.frozen
    class Options:
        start: float = option(help="Value at the start of every period.")
        end: float = option(help="Value the cosine reaches at the end of every period.")
        period_kimg: float = option(10.0, help="Length of the first period in kimg.", min=0, min_exclusive=True)
        period_mult: float = option(1.0, help="Each period is this many times longer than the one before.", min=1)

    def value(self, nimg: int, total_nimg: int) -> float:
        o = self.options
        kimg, period = nimg / 1000.0, o.period_kimg
        while kimg >= period:  # walk to the period that holds nimg (float math only)
            kimg -= period
            period *= o.period_mult
        return o.end + (o.start - o.end) * 0.5 * (1.0 + math.cos(math.pi * kimg / period))


@hookimpl
def register_schedules(register):
    register("restarts", Restarts)
