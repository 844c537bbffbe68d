"""Example gankit plugin: a dataset (kind ``dataset``, recipe table ``[data]``).

``blobs``: synthetic grey images of one Gaussian blob each, at a random position and width - a
data set with a known structure that needs no download, for checking that a GAN learns at all.

Use it::

    plugins = ["dataset_plugin.py"]
    [data]
    name = "blobs"
    resolution = 16
    num_images = 2048
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import DatasetFactory, hookimpl, option


class BlobImages(torch.utils.data.Dataset):
    """``images[i]``: float32 ``[1, H, W]`` in [-1, 1]."""

    def __init__(self, images: torch.Tensor):
        self.images = images

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[i]


class Blobs(DatasetFactory):
    """``num_images`` images ``[1, r, r]``: ``2 * exp(-|p - c|^2 / (2 s^2)) - 1`` for pixel p, with the
    centre c uniform in the image and the width s uniform in [0.05, 0.2] of the image side."""

    @attrs.frozen
    class Options:
        num_images: int = option(2048, help="Number of images.",
                                 validator=lambda v: None if v >= 1 else f"must be >= 1, got {v}")
        seed: int = option(0, help="Seed of the blob positions and widths (the same seed, the same data).")

    def build(self, resolution: int) -> torch.utils.data.Dataset:
        n = self.options.num_images
        # A private generator: building the data never moves the training RNG.
        g = torch.Generator().manual_seed(self.options.seed)
        centre = torch.rand(n, 2, 1, 1, generator=g) * resolution
        width = (0.05 + 0.15 * torch.rand(n, 1, 1, generator=g)) * resolution
        ys, xs = torch.meshgrid(torch.arange(resolution) + 0.5, torch.arange(resolution) + 0.5, indexing="ij")
        d2 = (ys - centre[:, 0]).square() + (xs - centre[:, 1]).square()  # [n, r, r]
        images = 2 * torch.exp(-d2 / (2 * width.square())) - 1
        return BlobImages(images.unsqueeze(1).float())


@hookimpl
def register_datasets(register):
    register("blobs", Blobs)
