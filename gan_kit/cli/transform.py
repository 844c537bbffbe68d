"""``--translate X,Y`` / ``--rotate DEG``: the click options and their parsing for every command
that draws a StyleGAN3 G's output moved through its input transform (``gankit generate``,
``gankit sample``; Karras et al. 2021, arXiv:2106.12423, as its gen_images.py)."""

from __future__ import annotations

import math

import click

from gan_kit.base.errors import GankitError

__all__ = ["transform_options", "output_transform"]

_FLOAT32_MAX = 3.4028234663852886e38


def transform_options(f):
    """The ``translate`` and ``rotate`` options (strings, None when not given) of a command."""
    f = click.option("--rotate", default=None, metavar="DEG",
                     help="StyleGAN3: rotate the images by DEG degrees, as its gen_images.py.")(f)
    return click.option("--translate", default=None, metavar="X,Y",
                        help="StyleGAN3: translate the images by X, Y image widths (e.g. 0.3,-0.2), as its "
                             "gen_images.py.")(f)


def output_transform(translate: str | None, rotate: str | None) -> tuple[tuple[float, float], float] | None:
    """``((x, y), degrees)`` for the flags' values (an absent one: 0), None when neither is
    given; GankitError (one line, naming the flag) for a value that is not finite numbers."""
    if translate is None and rotate is None:
        return None
    shift = _vector(translate, "--translate", "X,Y, two numbers in image widths, e.g. --translate 0.3,-0.2") \
        if translate is not None else (0.0, 0.0)
    angle = _vector(rotate, "--rotate", "degrees, one number, e.g. --rotate 25", size=1)[0] \
        if rotate is not None else 0.0
    return (shift[0], shift[1]), angle


def _vector(text: str, flag: str, expected: str, size: int = 2) -> tuple[float, ...]:
    """``text`` as ``size`` finite comma-separated numbers, or GankitError naming ``flag``."""
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    # float32's range, not float64's: G's transform is float32, where 1e300 widths is -inf (a
    # blank image, exit 0)
    if len(values) != size or not all(math.isfinite(v) and abs(v) <= _FLOAT32_MAX for v in values):
        raise GankitError(f"{flag}: {text!r} is not {expected}")
    return values
