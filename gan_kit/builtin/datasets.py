"""Datasets. ``digits`` is the embedded default: scikit-learn's bundled copy of the UCI optical
handwritten digits (1797 real 8x8 grey images), so gankit trains with no download."""

from __future__ import annotations

from typing import Literal

import attrs
import torch
import torch.nn.functional as F

from gan_kit import DatasetFactory, hookimpl, option
from gan_kit.data import TensorImages


class Digits(DatasetFactory):
    """UCI handwritten digits bundled with scikit-learn: 1797 real 8x8 images resized to data.resolution, in [-1, 1]."""

    @attrs.frozen
    class Options:
        interpolation: Literal["bilinear", "bicubic", "nearest"] = option(
            "bicubic", help="How the 8x8 images are resized to data.resolution.")
        digits: tuple[int, ...] | None = option(None, help="Keep only these classes (e.g. [0, 1]); None = all ten.")

    def build(self, resolution: int):
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # [N, 8, 8] in [0, 1]
        if self.options.digits is not None:
            keep = torch.isin(torch.as_tensor(bunch.target), torch.tensor(self.options.digits))
            images = images[keep]
        x = images.unsqueeze(1)
        if resolution != 8:
            mode = self.options.interpolation
            kwargs = {"align_corners": False} if mode != "nearest" else {}
            x = F.interpolate(x, size=(resolution, resolution), mode=mode, **kwargs)
        x = x.clamp(0.0, 1.0) * 2.0 - 1.0
        return TensorImages(x)


@hookimpl
def register_datasets(register):
    register("digits", Digits)
