"""Built-in schedule shapes (kind ``schedule``): ``constant`` (with a warm-up), ``linear``,
``cosine``, ``step`` and ``piecewise``, every length in kimg of real images shown.

Each shape's optional warm-up rises linearly from ``warmup_start`` over the first
``warmup_kimg`` (Goyal et al. 2017, sec. 2.2). ``linear`` and ``cosine`` decay from ``start`` to
``end`` between the warm-up's end and ``kimg`` (None = the run's ``run.total_kimg``) and hold
``end`` after it: the "cosine decay with warm-up" of Loshchilov & Hutter 2017 (SGDR, eq. 5, one
cycle) that R3GAN (Huang et al. 2024, sec. 4) uses for its learning rate, Adam's beta2, gamma and
the EMA half-life.
"""

from __future__ import annotations

import bisect
import math

import attrs

from gan_kit import Schedule, hookimpl, option, warmed_up

_KIMG = dict(min=0, max=1e9)


_WARMUP_KIMG = "Length of the linear warm-up in kimg (0 = none)."
_WARMUP_START = "Value at 0 images, where the warm-up starts (with warmup_kimg > 0)."


def _length(kimg: float | None, total_nimg: int) -> int:
    return total_nimg if kimg is None else int(round(kimg * 1000))


class Constant(Schedule):
    """A constant ``value``, reached by a linear warm-up over ``warmup_kimg``."""

    @attrs.frozen
    class Options:
        value: float = option(help="The value after the warm-up.")
        warmup_kimg: float = option(0.0, help=_WARMUP_KIMG, **_KIMG)
        warmup_start: float = option(0.0, help=_WARMUP_START)

    def value(self, nimg: int, total_nimg: int) -> float:
        o = self.options
        return warmed_up(o.value, nimg, int(round(o.warmup_kimg * 1000)), o.warmup_start)


class _Decay(Schedule):
    """``start`` -> ``end`` between the warm-up's end and ``kimg``, by ``shape(t)`` for t in [0, 1]."""

    @attrs.frozen
    class Options:
        start: float = option(help="Value at the end of the warm-up (at 0 images without one).")
        end: float = option(help="Value at kimg and after it.")
        kimg: float | None = option(None, help="Where the decay ends, in kimg from the start of training (warm-up "
                                               "included); None = run.total_kimg.", min=0, min_exclusive=True,
                                    max=1e9)
        warmup_kimg: float = option(0.0, help=_WARMUP_KIMG, **_KIMG)
        warmup_start: float = option(0.0, help=_WARMUP_START)

    @classmethod
    def problems(cls, options, recipe):
        if options.kimg is not None and options.warmup_kimg >= options.kimg:
            yield "warmup_kimg", (f"{options.warmup_kimg:g} is not below kimg = {options.kimg:g}: the warm-up must end "
                                  f"before the decay does (lower warmup_kimg or raise kimg)")

    @staticmethod
    def shape(t: float) -> float:
        raise NotImplementedError

    def value(self, nimg: int, total_nimg: int) -> float:
        o = self.options
        warm, length = int(round(o.warmup_kimg * 1000)), _length(o.kimg, total_nimg)
        if nimg < warm:
            return warmed_up(o.start, nimg, warm, o.warmup_start)
        t = 1.0 if nimg >= length else (nimg - warm) / max(length - warm, 1)
        return o.end + (o.start - o.end) * self.shape(t)


class Linear(_Decay):
    """Linear from ``start`` to ``end`` over ``kimg`` (after an optional warm-up), then ``end``."""

    @staticmethod
    def shape(t: float) -> float:
        return 1.0 - t


class Cosine(_Decay):
    """Half a cosine from ``start`` to ``end`` over ``kimg`` (after an optional warm-up), then ``end``:
    ``end + (start - end) * (1 + cos(pi t)) / 2`` (SGDR, Loshchilov & Hutter 2017, eq. 5)."""

    @staticmethod
    def shape(t: float) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * t))


class Step(Schedule):
    """``start``, multiplied by ``factor`` at each of ``milestones_kimg`` (torch's MultiStepLR, in
    kimg), after an optional warm-up to ``start``."""

    @attrs.frozen
    class Options:
        start: float = option(help="Value before the first milestone.")
        milestones_kimg: list[float] = option(help="Where the value is multiplied by factor, in kimg, ascending.",
                                              **_KIMG)
        factor: float = option(0.1, help="Multiplier at each milestone.")
        warmup_kimg: float = option(0.0, help=_WARMUP_KIMG, **_KIMG)
        warmup_start: float = option(0.0, help=_WARMUP_START)

    @classmethod
    def problems(cls, options, recipe):
        if list(options.milestones_kimg) != sorted(options.milestones_kimg):
            yield "milestones_kimg", f"{options.milestones_kimg} is not ascending (sort it)"

    def value(self, nimg: int, total_nimg: int) -> float:
        o = self.options
        passed = bisect.bisect_right([int(round(m * 1000)) for m in o.milestones_kimg], nimg)
        return warmed_up(o.start * o.factor ** passed, nimg, int(round(o.warmup_kimg * 1000)), o.warmup_start)


class Piecewise(Schedule):
    """Straight lines through the points (``kimg[i]``, ``values[i]``); ``values[0]`` before the
    first point and the last value after the last."""

    @attrs.frozen
    class Options:
        kimg: list[float] = option(help="The points' positions in kimg, ascending.", **_KIMG)
        values: list[float] = option(help="The value at each point (as many as kimg).")

    @classmethod
    def problems(cls, options, recipe):
        if len(options.kimg) != len(options.values) or not options.kimg:
            yield "values", (f"{len(options.values)} values for {len(options.kimg)} points: give one value per "
                             f"kimg point (at least one)")
        elif list(options.kimg) != sorted(options.kimg):
            yield "kimg", f"{options.kimg} is not ascending (sort it)"

    def value(self, nimg: int, total_nimg: int) -> float:
        o = self.options
        points = [p * 1000 for p in o.kimg]
        i = bisect.bisect_right(points, nimg)
        if i == 0:
            return o.values[0]
        if i == len(points):
            return o.values[-1]
        t = (nimg - points[i - 1]) / (points[i] - points[i - 1])
        return o.values[i - 1] + (o.values[i] - o.values[i - 1]) * t


@hookimpl
def register_schedules(register):
    register("constant", Constant)
    register("linear", Linear)
    register("cosine", Cosine)
    register("step", Step)
    register("piecewise", Piecewise)
