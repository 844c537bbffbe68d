"""Differentiable augmentation of D's inputs (component kind ``augment``): DiffAugment, and the
helpers ADA shares (ADA itself: ``gan_kit.builtin.augment.ada``).

The engine passes every image D sees (reals and fakes, in every update strategy and penalty)
through ``augment(images)``, calls ``augment.feedback(real_logits)`` after every D objective and
``augment.end_step(step, batch_size)`` after every iteration, and keeps ``state_dict()`` in
checkpoints. Both methods (DiffAugment here, ADA in ``ada.py``) are differentiable w.r.t. the
images (gradients reach G through them) and make a fresh random draw per call and per sample,
from the global torch RNG of the images' device, so a checkpoint's RNG state makes a resume
exact. Per-sample draws go through ``gan_kit.batch_rand`` / ``batch_randn`` / ``batch_randint``:
under N processes they are drawn for the global batch and sliced, so every sample gets the draw
it gets in one process.

Every transform is linear (or affine) in the pixel values for a fixed random draw: gathers,
masks, ``torch.where`` selections and ``F.grid_sample`` with a fixed grid. None works in place on
its input.

Images are ``[N, C, H, W]`` in [-1, 1] (gankit's convention); the output has the same shape and
dtype. ``F.grid_sample`` runs half-precision inputs in float32 and casts back, so bf16 / fp16
inputs work on the CPU too.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable

import attrs
import torch
import torch.nn.functional as F

from gan_kit import Augment, GankitError, batch_rand, batch_randint, hookimpl, option

__all__ = ["DiffAugment", "NoAugment", "register_augmentations", "parse_names", "DIFFAUGMENT_POLICIES"]


# --------------------------------------------------------------------------------------------
# Helpers shared by DiffAugment and ADA


def parse_names(text: str) -> list[str]:
    """Split a comma-separated list of names (``"color, translation"``), ignoring blanks."""
    return [part.strip() for part in text.split(",") if part.strip()]


def name_problems(text: str, available: tuple[str, ...], what: str, empty_fix: str) -> list[str]:
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


def raise_first_problem(cls: type, options: Any) -> None:
    """Components built directly (tests, scripts) check their options as a recipe load does
    (field validators, then ``problems``) and raise the first problem."""
    for field in attrs.fields(type(options)):
        validator = field.metadata.get("validator")
        message = validator(getattr(options, field.name)) if validator else None
        if message:
            raise GankitError(f"augment.{field.name}: {message}")
    for key, message in cls.problems(options, None):
        raise GankitError(f"augment.{key}: {message}")


def per_sample(draw: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """``[N]`` float32 draw -> ``[N,1,1,1]`` in the images' dtype, ready to broadcast."""
    return draw.to(images.dtype).view(-1, 1, 1, 1)


def gather_rows_cols(images: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
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
        for message in name_problems(options.policy, DIFFAUGMENT_POLICIES, "policy",
                                      "name at least one of color, translation, cutout, or remove the [augment] table"):
            yield "policy", message

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        raise_first_problem(type(self), self.options)
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
        images = images + per_sample(batch_rand(n, device=dev) - 0.5, images)
        mean_c = images.mean(dim=1, keepdim=True)
        images = mean_c + (images - mean_c) * per_sample(batch_rand(n, device=dev) * 2.0, images)
        mean = images.mean(dim=(1, 2, 3), keepdim=True)
        return mean + (images - mean) * per_sample(batch_rand(n, device=dev) + 0.5, images)

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
        return gather_rows_cols(padded, rows, cols)

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


class NoAugment(Augment):
    """No augmentation (the default): D sees the images as they are."""

    def __call__(self, images):
        return images


@hookimpl
def register_augmentations(register):
    """Register ``none`` and ``diffaugment`` (hook ``register_augmentations``, kind ``augment``;
    ``ada`` is registered by ``gan_kit.builtin.augment.ada``)."""
    register("none", NoAugment)
    register("diffaugment", DiffAugment)
