"""``ImageBatches``: one process's share of an image set, batch by batch - what a streamed metric
(``Metric.streamed``) reads instead of a tensor holding every image (gan_kit.tools.evaluate builds them
from G_ema and from the data set)."""

from __future__ import annotations

from typing import Callable, Iterator

import attrs
import torch

__all__ = ["ImageBatches"]


@attrs.frozen
class ImageBatches:
    """This process's share of an image set of ``n`` images, in batches of ``batch``.

    ``load(i) -> Tensor[b, C, H, W]`` (float, [-1, 1], any device) gives batch ``i`` (images
    ``i * batch`` .. ``min(n, (i + 1) * batch) - 1``); this process loads the batches ``i`` with
    ``i % world_size == rank``. ``key``: what identifies the set for the caches (e.g. the
    generator's weights, seed and count), or None to identify it by the images' bytes."""

    n: int
    batch: int
    load: Callable[[int], torch.Tensor]
    rank: int = 0
    world_size: int = 1
    key: tuple | None = None

    @property
    def num_batches(self) -> int:
        return -(-self.n // self.batch)

    def indices(self) -> range:
        """The batch indices of this process."""
        return range(self.rank, self.num_batches, self.world_size)

    def size(self, i: int) -> int:
        """Images in batch ``i``."""
        return min(self.batch, self.n - i * self.batch)

    def share(self) -> int:
        """Images of this process."""
        return sum(self.size(i) for i in self.indices())

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor]]:
        for i in self.indices():
            yield i, self.load(i)

    @classmethod
    def of_tensor(cls, images: torch.Tensor, batch: int) -> "ImageBatches":
        """One process's batches of an image tensor held whole (the metrics' tensor interface)."""
        return cls(int(images.shape[0]), batch, lambda i: images[i * batch:(i + 1) * batch])
