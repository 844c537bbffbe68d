"""stylegan2-ada-pytorch's ``augment_pipe`` as gankit's ``[augment] name = "ada"``.

An official snapshot (stylegan2-ada-pytorch, StyleGAN3) holds the training's ``AugmentPipe``: its
constructor's keyword arguments (``init_kwargs``: per-op probability multipliers ``xflip=1, ...,
imgfilter=1, noise=1, cutout=1`` and the ranges ``xint_max, scale_std, ..., imgfilter_bands,
imgfilter_std, noise_std, cutout_size``; ``train.py``'s ``augpipe_specs`` for the ``--augpipe``
presets) and its buffer ``p``, the probability ADA had reached. ``ada_options_from_official``
turns them into the ``[augment]`` table that runs the same pipeline in gankit
(``gan_kit.builtin.augment.ada``; Karras et al. 2020, arXiv:2006.06676, appendix B) and the
augmentation state with which a fine-tune starts at that p.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import torch

from gan_kit import GankitError
from gan_kit.builtin.augment import raise_first_problem
from gan_kit.builtin.augment.ada import AdaptiveAugment
from gan_kit.builtin.augment.ada_pipeline import OPS, PRESET_MULTIPLIERS, PRESETS
from gan_kit.builtin.augment.adaptive_p import AdaptiveP

__all__ = ["RANGES", "ada_options_from_official"]

#: AugmentPipe's range keyword arguments -> (gankit's ``ada`` option, the op it belongs to). The
#: defaults are the same on both sides.
RANGES: dict[str, tuple[str, str]] = {
    "xint_max": ("translate_ratio", "xint"), "scale_std": ("scale_std", "scale"),
    "rotate_max": ("rotate_max", "rotate"), "aniso_std": ("aniso_std", "aniso"), "xfrac_std": ("xfrac_std", "xfrac"),
    "brightness_std": ("brightness_std", "brightness"), "contrast_std": ("contrast_std", "contrast"),
    "hue_max": ("hue_max", "hue"), "saturation_std": ("saturation_std", "saturation"),
    "imgfilter_bands": ("imgfilter_bands", "imgfilter"), "imgfilter_std": ("imgfilter_std", "imgfilter"),
    "noise_std": ("noise_std", "noise"), "cutout_size": ("cutout_size", "cutout"),
}


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise GankitError(f"{where}.{key}: expected a finite number, got {value!r} (AugmentPipe takes a number here; "
                          f"the file is damaged or not stylegan2-ada-pytorch's)")
    return float(value)


def _preset(multipliers: dict[str, float]) -> tuple[str, dict[str, float]]:
    """``(pipeline, multipliers over it)``: the preset whose ops hold every op switched on and
    that needs the fewest multipliers to match (the preset itself when none is needed). A larger
    preset never ties with a smaller one: each op it adds is off here and needs a 0."""
    on = {op for op, m in multipliers.items() if m > 0}
    best = None
    for name, ops in PRESETS.items():
        if not on <= set(ops):
            continue
        own = {op: PRESET_MULTIPLIERS.get(name, {}).get(op, 1.0) for op in ops}
        needed = {op: multipliers.get(op, 0.0) for op in ops if multipliers.get(op, 0.0) != own[op]}
        if best is None or len(needed) < len(best[1]):
            best = (name, needed)
    assert best is not None  # 'bgcfnc' holds every op
    return best


def ada_options_from_official(init_kwargs: Mapping[str, Any], p: Any, *, where: str = "augment_pipe") -> dict:
    """The gankit augmentation of an official ``AugmentPipe``: ``{"table": {...}, "state": {...}}``.

    ``init_kwargs``: the pipe's keyword arguments as the snapshot stores them (a missing op is
    off, a missing range is AugmentPipe's default, which is gankit's); ``p``: its ``p`` buffer (a
    number or a 0-d tensor, >= 0; the official rule lets it pass 1). ``where`` names the pipe in
    errors (e.g. ``"network-snapshot-000100.pkl: augment_pipe"``).

    ``table``: the ``[augment]`` table - ``name = "ada"``, ``pipeline`` = the ``--augpipe`` preset
    (or 'r3gan') whose ops and multipliers the kwargs equal, else the smallest preset holding
    every op switched on plus ``multipliers`` for the ops that differ (0 for its ops that are
    off); each range that differs from the default for an op that is on (a range of an op that
    is off does nothing, there as here, and is left out); ``p_init = p`` when p <= 1. The ADA
    loop's own settings (``ada_target``, ``ada_kimg``) are not in the pipe and are left to the
    recipe. ``state``: what ``AdaptiveAugment.load_state_dict`` takes (``p`` and empty sign
    accumulators), so that a fine-tune starts at the file's p whatever p is.

    A negative multiplier (or band multiplier) becomes 0: AugmentPipe runs an op only when its
    multiplier is above 0 (a band at a negative multiplier never fires). Raises ``GankitError``
    naming the keyword argument and its value for what gankit cannot express: an unknown keyword
    argument, a value that is not a finite number, ``imgfilter_bands`` not 4 numbers, a range
    outside gankit's (``xint_max`` above 0.5, ``rotate_max`` / ``hue_max`` / ``cutout_size``
    above 1, a negative std: AugmentPipe draws ``2^(N(0, 1) * std)``, which a negative std
    mirrors draw by draw), every op off (nothing to augment: use ``name = "none"``), and a p
    below 0.
    """
    p_value = _number(p, where, "p")
    if p_value < 0:
        raise GankitError(f"{where}.p: p = {p_value:g} is negative; ADA's p is a probability scale >= 0 (the file is "
                          f"damaged)")
    multipliers: dict[str, float] = {}
    ranges: dict[str, Any] = {}
    for key, value in init_kwargs.items():
        if key in OPS:
            multipliers[key] = max(_number(value, where, key), 0.0)
        elif key == "imgfilter_bands":
            if not isinstance(value, (list, tuple)) or len(value) != 4:
                raise GankitError(f"{where}.imgfilter_bands: expected 4 band multipliers (lowest band first), got "
                                  f"{value!r}; gankit's filter bank has 4 bands, as AugmentPipe's")
            ranges[key] = tuple(max(_number(v, where, f"imgfilter_bands[{i}]"), 0.0) for i, v in enumerate(value))
        elif key in RANGES:
            ranges[key] = _number(value, where, key)
        else:
            raise GankitError(f"{where}.{key}: unknown AugmentPipe keyword argument {key!r} = {value!r}; gankit's 'ada' "
                              f"takes the ops {', '.join(OPS)} and the ranges {', '.join(RANGES)}")
    if not any(m > 0 for m in multipliers.values()):
        raise GankitError(f"{where}: every op is off ({dict(init_kwargs)!r}): the pipe leaves images unchanged; use "
                          f"[augment] name = \"none\"")
    pipeline, over = _preset(multipliers)
    table: dict[str, Any] = {"name": "ada", "pipeline": pipeline}
    if over:
        table["multipliers"] = over
    defaults = AdaptiveAugment.Options()
    for key, value in ranges.items():
        option, op = RANGES[key]
        if multipliers.get(op, 0.0) > 0 and value != getattr(defaults, option):
            table[option] = value
    if p_value <= 1:
        table["p_init"] = p_value
    options = {k: v for k, v in table.items() if k != "name"}
    try:
        raise_first_problem(AdaptiveAugment, AdaptiveAugment.Options(**options))
    except GankitError as e:  # a range gankit's 'ada' does not take: name the kwarg it came from
        option = str(e).split(":", 1)[0].removeprefix("augment.")
        key = next((k for k, (o, _) in RANGES.items() if o == option), option)
        raise GankitError(f"{where}.{key}: {key} = {init_kwargs.get(key)!r} is outside what gankit's 'ada' takes "
                          f"({str(e).split(': ', 1)[1]}); gankit cannot express this pipe") from None
    return {"table": table, "state": AdaptiveP(p_value).state_dict()}
