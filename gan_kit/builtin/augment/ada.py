"""``[augment] name = "ada"``: adaptive discriminator augmentation (ADA), Karras et al. 2020,
"Training Generative Adversarial Networks with Limited Data" (arXiv:2006.06676).

The pipeline is chosen with ``pipeline``: stylegan2-ada-pytorch's presets ('bgc', the paper's,
by default; 'blit', 'geom', 'color', 'filter', 'noise', 'cutout', 'bg', 'bgcf', 'bgcfn',
'bgcfnc') or R3GAN's ('r3gan'), implemented in
``gan_kit.builtin.augment.ada_pipeline`` with per-op probability multipliers (``multipliers``), or
``"gankit-subset"``, gankit 0.2's seven-transform pipeline (``gan_kit.builtin.augment.ada_subset``).
Whatever the pipeline, p is adapted by the paper's rule (sec. 3) as stylegan2-ada-pytorch's
training loop does; see ``AdaptiveAugment``.
"""

from __future__ import annotations

import difflib
from typing import Literal

import attrs
import torch

from gan_kit import Augment, hookimpl, option
from gan_kit.builtin.augment.adaptive_p import AdaptiveP
from gan_kit.builtin.augment.ada_pipeline import CUTOUT, FILTER, NOISE, OPS, PRESET_MULTIPLIERS, PRESETS, OfficialPipeline
from gan_kit.builtin.augment.ada_subset import ADA_TRANSFORMS, SubsetPipeline
from gan_kit.builtin.augment import name_problems, raise_first_problem, parse_names

__all__ = ["AdaptiveAugment", "PIPELINES", "SUBSET", "register_augmentations"]

SUBSET = "gankit-subset"
PIPELINES = (*PRESETS, SUBSET)

#: The op each range option belongs to (in the official pipelines), to refuse a range that
#: would do nothing.
_RANGE_OF = {"translate_ratio": "xint", "scale_std": "scale", "rotate_max": "rotate", "aniso_std": "aniso",
             "xfrac_std": "xfrac", "brightness_std": "brightness", "contrast_std": "contrast", "hue_max": "hue",
             "saturation_std": "saturation", "imgfilter_bands": "imgfilter", "imgfilter_std": "imgfilter",
             "noise_std": "noise", "cutout_size": "cutout"}
_NOT_IN_SUBSET = ("rotate_max", "aniso_std", "xfrac_std", "hue_max", "imgfilter_bands", "imgfilter_std", "noise_std",
                  "cutout_size")


def _pipeline_problem(value: str) -> str | None:
    if value in PIPELINES:
        return None
    close = difflib.get_close_matches(value, PIPELINES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown pipeline {value!r}{hint}; available: {', '.join(PIPELINES)}"


def _at_least(low: float):
    return lambda v: None if v >= low else f"must be >= {low:g}, got {v}"


def _with(op: str) -> str:
    """A preset that has ``op``: the fix of a "has no effect" problem."""
    if op in FILTER:
        return "bgcf"
    if op in NOISE:
        return "bgcfn"
    return "r3gan" if op in CUTOUT else "bgc"


def _multiplier_problems(o) -> list[tuple[str, str]]:
    """``(key, message)`` per entry of ``multipliers`` that names no op of the pipeline or holds a
    negative number (the recipe loader refuses NaN and inf before this)."""
    if not o.multipliers:
        return []
    if o.pipeline == SUBSET:
        given = ", ".join(f"{name} = {value:g}" for name, value in o.multipliers.items())
        return [("multipliers", f"{{{given}}} has no effect with pipeline = \"{SUBSET}\" (its transforms all run with "
                                f"probability p); remove it or use pipeline = \"bgc\"")]
    if o.pipeline not in PRESETS:  # refused by the pipeline's own check
        return []
    out = []
    ops = PRESETS[o.pipeline]
    for name, value in o.multipliers.items():
        key = f"multipliers.{name}"
        if name not in OPS:
            close = difflib.get_close_matches(name, OPS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append((key, f"unknown op {name!r} (= {value:g}){hint}; available: {', '.join(OPS)}"))
        elif name not in ops:
            out.append((key, f"{name} = {value:g} has no effect: pipeline \"{o.pipeline}\" has no {name} "
                             f"({', '.join(ops)}); "
                             f"remove it or use pipeline = \"{_with(name)}\""))
        elif not value >= 0:
            out.append((key, f"must be >= 0, got {value!r} (the op runs with probability p * {value!r}; "
                             f"0 turns it off)"))
    return out


class AdaptiveAugment(Augment):
    """ADA, adaptive discriminator augmentation, with stylegan2-ada-pytorch's pipelines ('bgc').

    Karras et al. 2020, "Training Generative Adversarial Networks with Limited Data"
    (arXiv:2006.06676), sec. 2.3-3 and appendix B, as stylegan2-ada-pytorch runs it.

    ``augment(images[N,C,H,W]) -> [N,C,H,W]`` (same dtype, images in [-1, 1]) runs ``pipeline``
    with probability ``p * multiplier`` per op and per sample, fresh draws per call
    (``gan_kit.batch_rand``): 'bgc' (default) = 'blit' (xflip, rotate90, xint) + 'geom' (scale,
    rotate, aniso, xfrac) + 'color' (brightness, contrast, lumaflip, hue, saturation), every
    multiplier 1, with stylegan2-ada-pytorch's ranges and one anti-aliased resampling for all
    geometric ops (``ada_pipeline``); 'bg' is 'blit' + 'geom'; 'bgcf', 'bgcfn', 'bgcfnc' add
    'filter' (imgfilter: random gains of four frequency bands, appendix B.3), 'noise' (additive
    RGB noise) and 'cutout' in turn; 'r3gan' is 'bgc' + 'cutout' with the colour multipliers 0.5
    (R3GAN's ``train.py``, Huang et al. 2024). ``multipliers``
    overrides a preset's (AugmentPipe's keyword arguments). ``"gankit-subset"`` is gankit 0.2's
    pipeline (``ada_subset``), its transforms chosen with ``transforms``. Differentiable w.r.t.
    the images.

    p follows the overfitting heuristic ``r_t = E[sign(D(real))]`` (sec. 3): the engine hands D's
    logits on the augmented reals of every D objective to ``feedback``; every ``interval``
    iterations ``end_step`` sets ``p <- max(p + sign(r_t - target) * nimg * interval /
    (kimg * 1000), 0)`` (then ``min(., p_max)`` when ``p_max`` is set), ``nimg`` the real images
    one iteration shows (global batch x ``update.d_steps``), and resets the accumulators: the rule
    of stylegan2-ada-pytorch's training loop (``ada_target``, ``ada_interval``, ``ada_kimg``),
    whose p is bounded below only (above 1 every op is always applied). Under several processes
    the accumulators are summed over all of them first (one all-reduce every ``interval``
    iterations). The p update itself does not sync the host with the device.

    ``state_dict()`` holds ``p``, the accumulated sign sum and count (0-dim CPU tensors). Raises
    ``GankitError`` when built with invalid options, on images a pipeline cannot take (colour ops
    on images that are neither RGB nor grey; imgfilter on images under 22 pixels on a side;
    ``rotate90`` of the subset on non-square images),
    and when ``load_state_dict`` gets a state without those keys.
    """

    @attrs.frozen
    class Options:
        pipeline: str = option("bgc", help="Augmentation pipeline: stylegan2-ada-pytorch's --augpipe presets 'bgc' (the "
                                           "paper's: blit + geom + color), 'blit', 'geom', 'color', 'filter', 'noise', "
                                           "'cutout', 'bg', 'bgcf', 'bgcfn', 'bgcfnc' (bgc + filter + noise + cutout); "
                                           "'r3gan' (R3GAN's: bgc + cutout, the colour ops at half probability); or "
                                           "'gankit-subset' (gankit 0.2's seven transforms, see docs/augmentation.md).",
                               validator=_pipeline_problem)
        multipliers: dict[str, float] = option(
            factory=dict, help="Per-op probability multipliers of the stylegan2-ada-pytorch pipelines (AugmentPipe's "
                               "keyword arguments), op name -> number >= 0: the op runs with probability p * "
                               "multiplier; 0 turns it off. An op not named keeps its preset's (1; 0.5 for the "
                               "colour ops of 'r3gan'). E.g. {brightness = 0.5, cutout = 0}. Ops: "
                               + ", ".join(OPS) + ".")
        target: float | None = option(
            0.6, help="Target of the overfitting heuristic r_t = E[sign(D(real))] (0.6 in the paper); None = a fixed "
                      "p: p_init throughout, never adapted (R3GAN's and the ADA paper's fixed-p baselines).",
            validator=lambda v: None if v is None or -1.0 <= v <= 1.0 else f"must be in [-1, 1] or none, got {v}")
        interval: int = option(4, help="Iterations between two adjustments of p (4 in the paper).",
                               validator=lambda v: None if v >= 1 else f"must be >= 1, got {v}")
        kimg: float = option(100.0, help="Speed of p: thousands of real images over which p can go from 0 to 1 (500 in the "
                                         "paper; 100 here because gankit's runs are short, see docs/augmentation.md).",
                             validator=lambda v: None if v > 0 else f"must be > 0, got {v}")
        p_init: float = option(0.0, help="Augmentation probability p at the start of training (0 in the paper); with "
                                         "target = none, the p of the whole run: a constant, or a schedule (R3GAN's "
                                         "cosine ramp of p) followed every iteration. With a target only its value "
                                         "when the run starts counts.",
                               validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}",
                               schedulable=True)
        p_max: float | None = option(None, help="Upper bound of p; None = none, the reference's rule (p >= 0 only; "
                                                "0.8 guarantees the non-leaking regime, see docs/augmentation.md).",
                                     validator=lambda v: None if v is None or 0.0 <= v <= 1.0
                                     else f"must be in [0, 1] or none, got {v}")
        translate_ratio: float = option(0.125, help="Largest integer translation as a fraction of the side "
                                                    "(stylegan2-ada-pytorch's xint_max; 1/8).",
                                        validator=lambda v: None if 0.0 <= v <= 0.5 else f"must be in [0, 0.5], got {v}")
        scale_std: float = option(0.2, help="Std of log2 of the isotropic scale factor (0.2).", validator=_at_least(0))
        rotate_max: float = option(1.0, help="Range of the arbitrary rotation, 1 = the full circle (1).",
                                   validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}")
        aniso_std: float = option(0.2, help="Std of log2 of the anisotropic scale factor (0.2).", validator=_at_least(0))
        xfrac_std: float = option(0.125, help="Std of the fractional translation as a fraction of the side (0.125).",
                                  validator=_at_least(0))
        brightness_std: float = option(0.2, help="Std of the brightness offset, in [-1, 1] pixel units (0.2).",
                                       validator=_at_least(0))
        contrast_std: float = option(0.5, help="Std of log2 of the contrast factor (0.5).", validator=_at_least(0))
        hue_max: float = option(1.0, help="Range of the hue rotation, 1 = the full circle (1).",
                                validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}")
        saturation_std: float = option(1.0, help="Std of log2 of the saturation factor (1).", validator=_at_least(0))
        imgfilter_bands: tuple[float, float, float, float] = option(
            (1.0, 1.0, 1.0, 1.0), help="Probability multipliers of the imgfilter op's four frequency bands, lowest "
                                       "first (0 to pi/8, to pi/4, to pi/2, to pi): band b is amplified with "
                                       "probability p * multiplier * imgfilter_bands[b] (AugmentPipe's "
                                       "imgfilter_bands).",
            validator=lambda v: None if all(b >= 0 for b in v) else f"each must be >= 0, got {list(v)}")
        imgfilter_std: float = option(1.0, help="Std of log2 of each band's gain in the imgfilter op (1).",
                                      validator=_at_least(0))
        noise_std: float = option(0.1, help="Scale of the additive RGB noise: its std per sample is |N(0, 1)| * noise_std, "
                                            "in [-1, 1] pixel units (0.1).", validator=_at_least(0))
        cutout_size: float = option(0.5, help="Side of the cutout rectangle as a fraction of each image side (0.5; "
                                              "AugmentPipe's cutout_size).",
                                    validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}")
        transforms: str | None = option(None, help="pipeline = 'gankit-subset' only: comma-separated transforms, applied in "
                                                   "the paper's order whatever the order here: " + ", ".join(ADA_TRANSFORMS)
                                                   + "; None = all.")
        translation_padding: Literal["reflect", "wrap"] | None = option(
            None, help="pipeline = 'gankit-subset' only: what moves in at the border on translation: the image mirrored "
                       "(reflect) or wrapped around (wrap); None = reflect.",
            validator=lambda v: None if v in (None, "reflect", "wrap") else f"expected 'reflect' or 'wrap', got {v!r}")

    @classmethod
    def problems(cls, options, recipe):
        o = options
        if o.pipeline == SUBSET:
            if o.transforms is not None:
                for message in name_problems(o.transforms, ADA_TRANSFORMS, "transform",
                                              "name at least one of " + ", ".join(ADA_TRANSFORMS)):
                    yield "transforms", message
            for key in _NOT_IN_SUBSET:
                if getattr(o, key) != _default(key):
                    yield key, (f"{key} = {getattr(o, key)!r} has no effect with pipeline = \"{SUBSET}\" "
                                f"(it has no {_RANGE_OF[key]}); "
                                f"remove it or use pipeline = \"{_with(_RANGE_OF[key])}\"")
        elif o.pipeline in PRESETS:
            for key in ("transforms", "translation_padding"):
                if getattr(o, key) is not None:
                    yield key, (f"applies to pipeline = \"{SUBSET}\" only (gankit 0.2's 'ada'); 'ada' now runs "
                                f"stylegan2-ada-pytorch's pipeline \"{o.pipeline}\": add pipeline = \"{SUBSET}\" to "
                                f"keep {key} = {getattr(o, key)!r}, or remove it")
            for key, op in _RANGE_OF.items():
                if op not in PRESETS[o.pipeline] and getattr(o, key) != _default(key):
                    yield key, (f"{key} = {getattr(o, key)!r} has no effect: pipeline \"{o.pipeline}\" has no {op} "
                                f"({', '.join(PRESETS[o.pipeline])}); remove it or use pipeline = \"{_with(op)}\"")
        yield from _multiplier_problems(o)
        if o.p_max is not None and o.p_init > o.p_max:
            yield "p_init", f"p_init = {o.p_init:g} is above p_max = {o.p_max:g} (lower p_init or raise p_max)"

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        raise_first_problem(type(self), self.options)
        o = self.options
        if o.pipeline == SUBSET:
            enabled = frozenset(parse_names(o.transforms) if o.transforms is not None else ADA_TRANSFORMS)
            self.pipeline = SubsetPipeline(enabled, o)
        else:
            multipliers = {**PRESET_MULTIPLIERS.get(o.pipeline, {}), **o.multipliers}
            self.pipeline = OfficialPipeline(PRESETS[o.pipeline], o, o.pipeline, multipliers)
        self.adaptive = AdaptiveP(o.p_init)

    @property
    def p(self) -> torch.Tensor:
        """The augmentation probability (0-d tensor; ``gan_kit.builtin.augment.adaptive_p``)."""
        return self.adaptive.p

    @p.setter
    def p(self, value: torch.Tensor) -> None:
        self.adaptive.p = value

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.pipeline(images, self.adaptive.on(images.device))

    def set_option(self, name: str, value) -> None:
        """Take a schedule's new value of option ``name`` (the engine calls this before every
        iteration). With ``target = None`` a scheduled ``p_init`` becomes p at once, so the
        iteration that follows augments with the schedule's value at the images shown before it,
        as R3GAN's training loop sets its pipe's p before each step (Huang et al. 2024, official
        code); the value is filled on p's device, never read back (no host sync)."""
        self.options = attrs.evolve(self.options, **{name: value})
        if name == "p_init" and self.options.target is None:
            self.p = torch.full((), float(value), device=self.p.device)

    # ---- adaptation of p

    def feedback(self, real_logits: torch.Tensor) -> None:
        """Accumulate ``sign(D(real))`` of one D objective's ``[N]`` logits (detached, on device;
        no host sync; NaN logits - a D step not applied - are not counted)."""
        self.adaptive.feedback(real_logits)

    def end_step(self, step: int, nimg: int) -> dict[str, float | torch.Tensor]:
        """After iteration ``step`` (iterations done), which showed D ``nimg`` real images (all
        processes, every critic step counted: global batch x ``d_steps``): every
        ``interval`` iterations adjust p (sec. 3) and return ``{"Augment/p", "Augment/rt"}``;
        otherwise ``{"Augment/p"}``. An interval without feedback leaves p unchanged. With
        ``target = None`` p stays ``p_init`` (fixed-p ADA) and only ``{"Augment/p"}`` is returned."""
        o = self.options
        if o.target is None:  # fixed p: the option's value, whatever a checkpoint held
            return self.adaptive.fix(o.p_init)
        return self.adaptive.adjust(step, nimg, target=o.target, interval=o.interval, kimg=o.kimg, p_max=o.p_max)

    def state_dict(self) -> dict:
        return self.adaptive.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.adaptive.load_state_dict(state, "ada")
        if self.options.target is None:
            self.p = torch.tensor(float(self.options.p_init))  # fixed p: the recipe's, not the checkpoint's


def _default(key: str):
    return attrs.fields_dict(AdaptiveAugment.Options)[key].default


@hookimpl
def register_augmentations(register):
    """Register ``ada`` (hook ``register_augmentations``, kind ``augment``)."""
    register("ada", AdaptiveAugment)
