"""The ``schedule`` component kind: the value of one numeric option over training.

A recipe writes a schedule in place of a constant, next to the option it drives::

    [optim]
    lr = { schedule = "cosine", start = 0.002, end = 0.0002, warmup_kimg = 5 }
    betas = [0.0, { schedule = "linear", start = 0.9, end = 0.99, kimg = 50 }]

    [[penalty]]
    name = "r1"
    weight = { schedule = "cosine", start = 0.1, end = 0.01 }

``schedule`` names a component of kind ``schedule`` (``register_schedules``); the other keys are
its options. Only options declared ``option(..., schedulable=True)`` take one (the rest refuse it
at recipe load, in one line).
"""

from __future__ import annotations

from gan_kit.plugin_api.components import ComponentBase

__all__ = ["Schedule", "warmed_up"]


class Schedule(ComponentBase):
    """``value(nimg, total_nimg) -> float``: the option's value once ``nimg`` real images have
    been shown, in a run planned for ``total_nimg`` (``run.total_kimg * 1000``).

    A pure function of its two arguments - no state, no randomness, no device - so a resumed run
    (which knows only ``cur_nimg``) and every process of a multi-process run get the same value
    as one uninterrupted process, to the last bit. The engine calls it in plain Python before
    every iteration (no tensor, no host-device sync) and writes the result where the option acts
    (an optimizer's ``param_groups``, a penalty's weight, a component's ``options``).

    ``nimg`` counts every real image D was shown (all processes, every critic step), as
    ``run.cur_nimg`` does; a schedule in kimg divides by 1000. The recipe loader evaluates the
    schedule at 1025 evenly spaced points of the run and refuses values outside the option's
    declared range (an exclusive lower bound of 0, as for a learning rate, may be touched: a
    warm-up from 0).
    """

    def value(self, nimg: int, total_nimg: int) -> float:
        raise NotImplementedError


def warmed_up(value: float, nimg: int, warmup_nimg: int, warmup_start: float) -> float:
    """``value`` after a linear warm-up: ``warmup_start + (value - warmup_start) * nimg /
    warmup_nimg`` while ``nimg < warmup_nimg``, then ``value`` itself (Goyal et al. 2017, "gradual
    warm-up", sec. 2.2; a target that is itself moving is followed, as timm and R3GAN do)."""
    if warmup_nimg <= 0 or nimg >= warmup_nimg:
        return value
    return warmup_start + (value - warmup_start) * (nimg / warmup_nimg)
