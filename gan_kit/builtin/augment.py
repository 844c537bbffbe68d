"""Differentiable augmentation of D's inputs (component kind ``augment``): DiffAugment and ADA.

The engine passes every image D sees (reals and fakes, in every update strategy and penalty)
through ``augment(images)``, calls ``augment.feedback(real_logits)`` after every D objective and
``augment.end_step(step, batch_size)`` after every iteration, and keeps ``state_dict()`` in
checkpoints. Both methods here are differentiable w.r.t. the images (gradients reach G through
them) and make a fresh random draw per call and per sample, from the global torch RNG of the
images' device, so a checkpoint's RNG state makes a resume exact. Per-sample draws go through
``gan_kit.batch_rand`` / ``batch_randn`` / ``batch_randint``: under N processes they are drawn for
the global batch and sliced, so every sample gets the draw it gets in one process.

Every transform is linear (or affine) in the pixel values for a fixed random draw: gathers,
masks, ``torch.where`` selections and ``F.grid_sample`` with a fixed grid. None works in place on
its input.

Images are ``[N, C, H, W]`` in [-1, 1] (gankit's convention); the output has the same shape and
dtype. ``F.grid_sample`` runs half-precision inputs in float32 and casts back, so bf16 / fp16
inputs work on the CPU too.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Callable, Literal

import attrs
import torch
import torch.nn.functional as F

from gan_kit import Augment, GankitError, batch_rand, batch_randint, batch_randn, hookimpl, option

__all__ = ["DiffAugment", "AdaptiveAugment", "register_augmentations", "parse_names",
           "DIFFAUGMENT_POLICIES", "ADA_TRANSFORMS"]


# --------------------------------------------------------------------------------------------
# Helpers shared by both methods


def parse_names(text: str) -> list[str]:
    """Split a comma-separated list of names (``"color, translation"``), ignoring blanks."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _name_problems(text: str, available: tuple[str, ...], what: str, empty_fix: str) -> list[str]:
    """One message per problem of a comma-separated list of names (unknown, repeated, empty)."""
    names = parse_names(text)
    if not names:
        return [f"is empty ({text!r}); {empty_fix}"]
    out, seen = [], set()
    for name in names:
        if name not in available:
            close = difflib.get_close_matches(name, available, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(f"unknown {what} {name!r} in {text!r}{hint}; available: {', '.join(sorted(available))}")
        elif name in seen:
            out.append(f"{what} {name!r} is listed twice in {text!r} (list each once)")
        seen.add(name)
    return out


def _raise_first(cls: type, options: Any) -> None:
    """Components built directly (tests, scripts) check their options as a recipe load does
    (field validators, then ``problems``) and raise the first problem."""
    for field in attrs.fields(type(options)):
        validator = field.metadata.get("validator")
        message = validator(getattr(options, field.name)) if validator else None
        if message:
            raise GankitError(f"augment.{field.name}: {message}")
    for key, message in cls.problems(options, None):
        raise GankitError(f"augment.{key}: {message}")


def _per_sample(draw: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """``[N]`` float32 draw -> ``[N,1,1,1]`` in the images' dtype, ready to broadcast."""
    return draw.to(images.dtype).view(-1, 1, 1, 1)


def _gather_rows_cols(images: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``out[n, c, i, j] = images[n, c, rows[n, i], cols[n, j]]``: a per-sample permutation /
    selection of rows and columns (``rows [N,H']``, ``cols [N,W']``, int64), differentiable (the
    gradient scatters back to the selected pixels)."""
    n, c, h, w = images.shape
    out = images.gather(2, rows.view(n, 1, -1, 1).expand(n, c, rows.shape[1], w))
    return out.gather(3, cols.view(n, 1, 1, -1).expand(n, c, rows.shape[1], cols.shape[1]))


# --------------------------------------------------------------------------------------------
# DiffAugment (Zhao et al. 2020)

DIFFAUGMENT_POLICIES = ("color", "translation", "cutout")


class DiffAugment(Augment):
    """DiffAugment: Zhao et al. 2020, "Differentiable Augmentation for Data-Efficient GAN
    Training" (arXiv:2006.10738), sec. 3, with the policies of the authors' public code.

    ``augment(images[N,C,H,W]) -> [N,C,H,W]`` (same dtype) applies the ``policy`` transforms in
    the order listed, each with a fresh per-sample draw on every call:

    - ``color``: brightness ``x + b``, ``b ~ U(-0.5, 0.5)``; saturation
      ``mean_c + (x - mean_c) * s``, ``s ~ U(0, 2)``, ``mean_c`` the per-pixel mean over channels
      (a no-op for grey images, C = 1, where ``x == mean_c``); contrast
      ``mean + (x - mean) * k``, ``k ~ U(0.5, 1.5)``, ``mean`` over C, H, W of the image.
      Saturation and contrast commute with any affine map of the pixel range, so they are the
      same on gankit's [-1, 1] images as on [0, 1] ones; the brightness offset is in the units of
      [-1, 1] images, as in the authors' code (which also works on [-1, 1]), i.e. at most a quarter
      of the range.
    - ``translation``: an integer shift of each axis, uniform in ``[-m, m]`` with
      ``m = round(translation_ratio * side)``, filled with zeros (mid-grey in [-1, 1]).
    - ``cutout``: a zeroed square of side ``round(cutout_ratio * side)`` centred on a uniformly
      drawn pixel (so it may be clipped by the border, as in the authors' code).

    Every transform is linear or affine in the pixels, so gradients reach G unchanged in kind.
    Raises ``GankitError`` when built with an invalid policy (a recipe reports it at load through
    ``problems``). DiffAugment has no state: ``feedback`` does nothing, ``end_step`` returns {}.
    """

    @attrs.frozen
    class Options:
        policy: str = option("color,translation,cutout",
                             help="Comma-separated DiffAugment policies, applied in this order: color, translation, "
                                  "cutout (the paper's default for unconditional generation is all three).")
        translation_ratio: float = option(0.125, help="Largest shift as a fraction of the image side (1/8 in the paper).",
                                          validator=lambda v: None if 0.0 <= v <= 0.5 else f"must be in [0, 0.5], got {v}")
        cutout_ratio: float = option(0.5, help="Side of the cutout square as a fraction of the image side (1/2 in the paper).",
                                     validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}")

    @classmethod
    def problems(cls, options, recipe):
        for message in _name_problems(options.policy, DIFFAUGMENT_POLICIES, "policy",
                                      "name at least one of color, translation, cutout, or remove the [augment] table"):
            yield "policy", message

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        _raise_first(type(self), self.options)
        steps: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
            "color": self.color, "translation": self.translation, "cutout": self.cutout}
        self.transforms = [steps[name] for name in parse_names(self.options.policy)]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        for transform in self.transforms:
            images = transform(images)
        return images

    # Each transform draws its own parameters, in a fixed order, from the global RNG.

    @staticmethod
    def color(images: torch.Tensor) -> torch.Tensor:
        """Brightness, then saturation, then contrast (the authors' order)."""
        n, dev = images.shape[0], images.device
        images = images + _per_sample(batch_rand(n, device=dev) - 0.5, images)
        mean_c = images.mean(dim=1, keepdim=True)
        images = mean_c + (images - mean_c) * _per_sample(batch_rand(n, device=dev) * 2.0, images)
        mean = images.mean(dim=(1, 2, 3), keepdim=True)
        return mean + (images - mean) * _per_sample(batch_rand(n, device=dev) + 0.5, images)

    def translation(self, images: torch.Tensor) -> torch.Tensor:
        """Integer shift by up to ``translation_ratio`` of the side, zero padded."""
        n, _, h, w = images.shape
        my, mx = int(h * self.options.translation_ratio + 0.5), int(w * self.options.translation_ratio + 0.5)
        dev = images.device
        ty = batch_randint(-my, my + 1, n, 1, device=dev)
        tx = batch_randint(-mx, mx + 1, n, 1, device=dev)
        if my == 0 and mx == 0:
            return images
        # Pad with zeros by the largest shift, then read each output pixel from (i - t) in the
        # padded frame: the read never leaves it, and the padded zeros fill what moves in.
        padded = F.pad(images, (mx, mx, my, my))
        rows = torch.arange(h, device=dev).view(1, -1) - ty + my
        cols = torch.arange(w, device=dev).view(1, -1) - tx + mx
        return _gather_rows_cols(padded, rows, cols)

    def cutout(self, images: torch.Tensor) -> torch.Tensor:
        """Zero a square of side ``cutout_ratio * side`` centred on a random pixel."""
        n, _, h, w = images.shape
        sh, sw = int(h * self.options.cutout_ratio + 0.5), int(w * self.options.cutout_ratio + 0.5)
        dev = images.device
        # Top-left corner in [-floor(s/2), side - ceil(s/2)]: the square's centre pixel is uniform
        # over the image, and a square at the border is clipped.
        y0 = batch_randint(0, h + 1 - sh % 2, n, 1, 1, device=dev) - sh // 2
        x0 = batch_randint(0, w + 1 - sw % 2, n, 1, 1, device=dev) - sw // 2
        ys = torch.arange(h, device=dev).view(1, -1, 1)
        xs = torch.arange(w, device=dev).view(1, 1, -1)
        inside = (ys >= y0) & (ys < y0 + sh) & (xs >= x0) & (xs < x0 + sw)
        return images * (~inside).unsqueeze(1).to(images.dtype)

    def feedback(self, real_logits: torch.Tensor) -> None:
        """DiffAugment does not adapt: nothing to accumulate."""

    def end_step(self, step: int, nimg: int) -> dict[str, float | torch.Tensor]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise GankitError(f"augment: the checkpoint holds augmentation state {sorted(state)} that 'diffaugment' "
                              f"does not have (it was written by another augmentation; use that one to resume)")


# --------------------------------------------------------------------------------------------
# ADA (Karras et al. 2020)

ADA_TRANSFORMS = ("xflip", "rotate90", "translation", "scale", "brightness", "contrast", "saturation")

_LN2 = math.log(2.0)


def _reflect(index: torch.Tensor, size: int) -> torch.Tensor:
    """Mirror an index into [0, size) without repeating the edge pixel (``F.pad`` "reflect"),
    valid for indexes in (-size, 2 * size - 1)."""
    if size == 1:
        return torch.zeros_like(index)
    index = index.abs()
    return (size - 1) - ((size - 1) - index).abs()


class AdaptiveAugment(Augment):
    """ADA: adaptive discriminator augmentation, Karras et al. 2020, "Training Generative
    Adversarial Networks with Limited Data" (arXiv:2006.06676), sec. 2.3-3 and appendix B.

    ``augment(images[N,C,H,W]) -> [N,C,H,W]`` (same dtype) runs the pipeline below; each
    transform is applied to each sample independently with probability ``p`` (fresh draws per
    call), in the paper's order (geometric, then colour):

    - ``xflip``: when applied, a horizontal flip with probability 1/2 (identity otherwise).
    - ``rotate90``: when applied, a rotation by k * 90 degrees, k uniform in {0, 1, 2, 3}
      (square images only).
    - ``translation``: integer shift of each axis by ``round(t * side)``, ``t ~ U(-r, r)``,
      ``r = translate_ratio`` (1/8); the pixels that move in are the image mirrored at its border
      (``translation_padding = "reflect"``, as the paper's pipeline pads) or wrapped around
      (``"wrap"``).
    - ``scale``: isotropic scaling by ``s = 2^(N(0, scale_std))`` (lognormal, std
      ``0.2 * ln 2``) about the centre, bilinear resampling with ``F.grid_sample`` and reflection
      padding (the paper's anti-aliased resampling is replaced by plain bilinear interpolation).
    - ``brightness``: ``x + b``, ``b ~ N(0, brightness_std = 0.2)`` in [-1, 1] units.
    - ``contrast``: ``x * c``, ``c = 2^(N(0, contrast_std = 0.5))`` (lognormal, std
      ``0.5 * ln 2``), about 0, which is mid-grey for [-1, 1] images (as in the paper's pipeline).
    - ``saturation``: ``mean_c + (x - mean_c) * s``, ``s = 2^(N(0, saturation_std = 1))``
      (lognormal, std ``ln 2``), ``mean_c`` the per-pixel mean over channels (the luma axis of
      the paper, appendix B); a no-op for grey images (C = 1).

    p is adjusted from the overfitting heuristic ``r_t = E[sign(D(real))]`` (sec. 3): the engine
    hands D's logits on the augmented reals of every D objective to ``feedback``; every
    ``interval`` iterations ``end_step`` sets
    ``p <- clamp(p + sign(r_t - target) * nimg * interval / (kimg * 1000), 0, p_max)``, ``nimg``
    the real images one iteration shows (global batch x ``update.d_steps``), and resets the
    accumulators (sec. 3): p moves at most 1 per ``kimg`` thousand real images shown, whatever the
    number of critic steps per iteration. Under several processes the accumulators are summed over
    all of them first (one all-reduce every ``interval`` iterations), so every process keeps the
    same p. No step of this syncs the host with the device.

    ``state_dict()`` holds ``p``, the accumulated sign sum and count (0-dim CPU tensors).
    Raises ``GankitError`` when built with invalid options, on non-square images with
    ``rotate90``, and when ``load_state_dict`` gets a state without those keys.
    """

    @attrs.frozen
    class Options:
        target: float = option(0.6, help="Target of the overfitting heuristic r_t = E[sign(D(real))] (0.6 in the paper).",
                               validator=lambda v: None if -1.0 <= v <= 1.0 else f"must be in [-1, 1], got {v}")
        interval: int = option(4, help="Iterations between two adjustments of p (4 in the paper).",
                               validator=lambda v: None if v >= 1 else f"must be >= 1, got {v}")
        kimg: float = option(100.0, help="Speed of p: thousands of real images over which p can go from 0 to 1 (500 in the "
                                         "paper; 100 here because gankit's runs are short, see docs/augmentation.md).",
                             validator=lambda v: None if v > 0 else f"must be > 0, got {v}")
        p_init: float = option(0.0, help="Augmentation probability p at the start of training (0 in the paper).",
                               validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}")
        p_max: float = option(1.0, help="Upper bound of p (the paper does not bound it below 1; 0.8 guarantees the "
                                        "non-leaking regime, see docs/augmentation.md).",
                              validator=lambda v: None if 0.0 <= v <= 1.0 else f"must be in [0, 1], got {v}")
        transforms: str = option(",".join(ADA_TRANSFORMS),
                                 help="Comma-separated transforms of the pipeline (applied in the paper's order whatever "
                                      "the order here): " + ", ".join(ADA_TRANSFORMS) + ".")
        translate_ratio: float = option(0.125, help="Largest integer translation as a fraction of the side (1/8 in the paper).",
                                        validator=lambda v: None if 0.0 <= v <= 0.5 else f"must be in [0, 0.5], got {v}")
        translation_padding: Literal["reflect", "wrap"] = option(
            "reflect", help="What moves in at the border on translation: the image mirrored (reflect, the paper's "
                            "padding) or wrapped around (wrap).",
            validator=lambda v: None if v in ("reflect", "wrap") else f"expected 'reflect' or 'wrap', got {v!r}")
        scale_std: float = option(0.2, help="Std of log2 of the isotropic scale factor (0.2 in the paper).",
                                  validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")
        brightness_std: float = option(0.2, help="Std of the brightness offset, in [-1, 1] pixel units (0.2 in the paper).",
                                       validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")
        contrast_std: float = option(0.5, help="Std of log2 of the contrast factor (0.5 in the paper).",
                                     validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")
        saturation_std: float = option(1.0, help="Std of log2 of the saturation factor (1 in the paper).",
                                       validator=lambda v: None if v >= 0 else f"must be >= 0, got {v}")

    @classmethod
    def problems(cls, options, recipe):
        for message in _name_problems(options.transforms, ADA_TRANSFORMS, "transform",
                                      "name at least one of " + ", ".join(ADA_TRANSFORMS)):
            yield "transforms", message
        if options.p_init > options.p_max:
            yield "p_init", (f"p_init = {options.p_init:g} is above p_max = {options.p_max:g} "
                             f"(lower p_init or raise p_max)")

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        _raise_first(type(self), self.options)
        self.enabled = frozenset(parse_names(self.options.transforms))
        self.p = torch.tensor(float(self.options.p_init))
        self.sign_sum = torch.tensor(0.0)
        self.sign_count = torch.tensor(0.0)

    # ---- the pipeline

    def _applied(self, n: int, device: torch.device) -> torch.Tensor:
        """``[N]`` bool: which samples this transform is applied to (probability p each)."""
        return batch_rand(n, device=device) < self.p

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n, c, h, w = images.shape
        dev = images.device
        if self.p.device != dev:
            # Once (first call, or after load_state_dict): a host-to-device copy waits for the
            # device, so p must not travel on every call.
            self.p = self.p.to(dev)
        o = self.options
        on = self.enabled
        # An enabled transform draws its parameters whether or not it is applied, so the
        # sequence of draws (and a resume's RNG state) does not depend on p.
        if "xflip" in on:
            flip = self._applied(n, dev) & (batch_rand(n, device=dev) < 0.5)
            images = torch.where(flip.view(-1, 1, 1, 1), images.flip(3), images)
        if "rotate90" in on:
            if h != w:
                raise GankitError(f"augment.transforms: 'rotate90' needs square images, got {h}x{w} "
                                  f"(remove rotate90 from augment.transforms)")
            k = torch.floor(batch_rand(n, device=dev) * 4).long()
            k = torch.where(self._applied(n, dev), k, torch.zeros_like(k))
            turns = torch.stack([torch.rot90(images, i, dims=(2, 3)) for i in range(4)], dim=1)
            images = turns[torch.arange(n, device=dev), k]
        if "translation" in on:
            images = self._translate(images)
        if "scale" in on:
            images = self._scale(images)
        if "brightness" in on:
            b = batch_randn(n, device=dev) * o.brightness_std
            b = torch.where(self._applied(n, dev), b, torch.zeros_like(b))
            images = images + _per_sample(b, images)
        if "contrast" in on:
            cf = torch.exp2(batch_randn(n, device=dev) * o.contrast_std)
            cf = torch.where(self._applied(n, dev), cf, torch.ones_like(cf))
            images = images * _per_sample(cf, images)
        if "saturation" in on:
            s = torch.exp2(batch_randn(n, device=dev) * o.saturation_std)
            applied = self._applied(n, dev)
            if c > 1:  # one channel has no chroma: mean_c == x, nothing to scale
                mean_c = images.mean(dim=1, keepdim=True)
                saturated = mean_c + (images - mean_c) * _per_sample(s, images)
                # mean_c + (x - mean_c) is not exactly x in floating point: keep the samples left
                # alone bit-exact.
                images = torch.where(applied.view(-1, 1, 1, 1), saturated, images)
        return images

    def _translate(self, images: torch.Tensor) -> torch.Tensor:
        n, _, h, w = images.shape
        dev = images.device
        r = self.options.translate_ratio
        t = (batch_rand(n, 2, device=dev) * 2 - 1) * r
        applied = self._applied(n, dev)
        ty = torch.where(applied, torch.round(t[:, 0] * h), torch.zeros(n, device=dev)).long().view(n, 1)
        tx = torch.where(applied, torch.round(t[:, 1] * w), torch.zeros(n, device=dev)).long().view(n, 1)
        rows = torch.arange(h, device=dev).view(1, -1) - ty
        cols = torch.arange(w, device=dev).view(1, -1) - tx
        if self.options.translation_padding == "wrap":
            rows, cols = rows % h, cols % w
        else:
            rows, cols = _reflect(rows, h), _reflect(cols, w)
        return _gather_rows_cols(images, rows, cols)

    def _scale(self, images: torch.Tensor) -> torch.Tensor:
        n = images.shape[0]
        dev = images.device
        s = torch.exp2(batch_randn(n, device=dev) * self.options.scale_std)
        applied = self._applied(n, dev)
        s = torch.where(applied, s, torch.ones_like(s))
        # Output pixel at normalised position u shows the input at u / s (content grows by s).
        theta = torch.zeros(n, 2, 3, device=dev)
        theta[:, 0, 0] = 1.0 / s
        theta[:, 1, 1] = 1.0 / s
        # Half precision resamples in float32 (CPU grid_sample lacks bf16 kernels, and the
        # weights want the precision); float32 / float64 stay as they are.
        work = images if images.dtype in (torch.float32, torch.float64) else images.float()
        grid = F.affine_grid(theta.to(work.dtype), list(images.shape), align_corners=False)
        scaled = F.grid_sample(work, grid, mode="bilinear", padding_mode="reflection",
                               align_corners=False).to(images.dtype)
        # Samples left alone keep their exact pixels (identity resampling rounds in float).
        return torch.where(applied.view(-1, 1, 1, 1), scaled, images)

    # ---- adaptation of p

    def feedback(self, real_logits: torch.Tensor) -> None:
        """Accumulate ``sign(D(real))`` of one D objective's ``[N]`` logits (detached, on device;
        no host sync)."""
        signs = real_logits.detach().float().sign()
        dev = signs.device
        if self.sign_sum.device != dev:  # once: the accumulators then live beside the logits
            self.sign_sum, self.sign_count = self.sign_sum.to(dev), self.sign_count.to(dev)
        self.sign_sum = self.sign_sum + signs.sum()
        self.sign_count = self.sign_count + signs.numel()

    def end_step(self, step: int, nimg: int) -> dict[str, float | torch.Tensor]:
        """After iteration ``step`` (iterations done), which showed D ``nimg`` real images (all
        processes, every critic step counted: global batch x ``d_steps``): every
        ``interval`` iterations adjust p (sec. 3) and return ``{"Augment/p", "Augment/rt"}``;
        otherwise ``{"Augment/p"}``. An interval without feedback leaves p unchanged."""
        o = self.options
        if step % o.interval:
            return {"Augment/p": self.p}
        dev = self.sign_sum.device
        totals = torch.stack([self.sign_sum, self.sign_count])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(totals)
        r_t = totals[0] / totals[1].clamp(min=1.0)
        step_size = nimg * o.interval / (o.kimg * 1000.0)
        adjust = torch.sign(r_t - o.target) * step_size * (totals[1] > 0).float()
        self.p = (self.p.to(dev) + adjust).clamp(0.0, o.p_max)
        self.sign_sum = torch.zeros((), device=dev)
        self.sign_count = torch.zeros((), device=dev)
        return {"Augment/p": self.p, "Augment/rt": r_t}

    def state_dict(self) -> dict:
        return {"p": self.p.detach().cpu().clone(), "sign_sum": self.sign_sum.detach().cpu().clone(),
                "sign_count": self.sign_count.detach().cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        missing = [k for k in ("p", "sign_sum", "sign_count") if k not in state]
        if missing:
            raise GankitError(f"augment: the checkpoint's augmentation state lacks {', '.join(missing)} "
                              f"(it was not written by 'ada'; resume with the augmentation that wrote it)")
        self.p = torch.as_tensor(state["p"], dtype=torch.float32).clone()
        self.sign_sum = torch.as_tensor(state["sign_sum"], dtype=torch.float32).clone()
        self.sign_count = torch.as_tensor(state["sign_count"], dtype=torch.float32).clone()


class NoAugment(Augment):
    """No augmentation (the default): D sees the images as they are."""

    def __call__(self, images):
        return images


@hookimpl
def register_augmentations(register):
    """Register the built-in augmentations (hook ``register_augmentations``, kind ``augment``)."""
    register("none", NoAugment)
    register("diffaugment", DiffAugment)
    register("ada", AdaptiveAugment)
