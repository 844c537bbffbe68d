"""Feeding real images: a resumable batch sampler whose batch size follows the growth schedule."""

from __future__ import annotations

import functools
from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class TensorImages(Dataset):
    """An in-memory dataset of images ``[N, C, H, W]`` in [-1, 1]; batches are fetched with one
    indexing operation (``__getitems__``) instead of N item calls."""

    def __init__(self, images: torch.Tensor):
        self.images = images.contiguous()

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[i]

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        return self.images[torch.as_tensor(indices, dtype=torch.long)]


def collate_images(batch) -> torch.Tensor:
    """Stack items into ``[N,C,H,W]``; an item may be ``(image, label)`` (the label is dropped)."""
    if isinstance(batch, torch.Tensor):
        return batch
    items = [b[0] if isinstance(b, (tuple, list)) else b for b in batch]
    return torch.stack(items)


def index_at(n: int, seed: int, position: int, count: int) -> list[int]:
    """``count`` dataset indices starting at stream ``position``.

    The stream is the concatenation of epoch permutations; epoch ``e`` is a permutation of
    ``range(n)`` drawn from a generator seeded with ``seed * 1_000_003 + e``, so any position can
    be reproduced without replaying the stream (exact resume, any number of processes).
    """
    out: list[int] = []
    while count > 0:
        epoch, offset = divmod(position, n)
        perm = _epoch_permutation(n, seed, epoch)
        take = min(count, n - offset)
        out.extend(perm[offset:offset + take].tolist())
        position += take
        count -= take
    return out


@functools.lru_cache(maxsize=4)
def _epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


class PhaseBatchSampler(Sampler[list[int]]):
    """Yields, for every training iteration, this process's indices of ``d_steps`` batches.

    ``batch_for(position) -> (global_batch_size, d_steps)`` comes from the growth schedule at
    the iteration's first image. Each of the ``d_steps`` global batches is split across
    ``world_size`` processes with stride ``world_size`` (process r takes samples r, r + W, ...),
    which keeps the strided minibatch-stddev groups of a one-process run. The stream position
    advances by the global amount, so it equals ``cur_nimg`` and resumes exactly from a
    checkpoint, whatever the process count.

    It plays the part of ``torch.utils.data.DistributedSampler`` (a per-process share of one
    shuffled epoch stream), which cannot serve here: that one splits an epoch contiguously by
    index into per-process lists fixed by ``set_epoch``, knows no batch size that changes with the
    phase, and resumes mid-epoch only by replaying it with the same process count.
    """

    def __init__(self, n: int, seed: int, start: int, batch_for: Callable[[int], tuple[int, int]],
                 rank: int = 0, world_size: int = 1):
        self.n, self.seed, self.position = n, seed, start
        self.batch_for, self.rank, self.world_size = batch_for, rank, world_size

    def __iter__(self) -> Iterator[list[int]]:
        position = self.position
        while True:
            batch, d_steps = self.batch_for(position)
            idx = index_at(self.n, self.seed, position, batch * d_steps)
            mine: list[int] = []
            for j in range(d_steps):
                mine.extend(idx[j * batch:(j + 1) * batch][self.rank::self.world_size])
            position += batch * d_steps
            yield mine

    def __len__(self) -> int:  # infinite; DataLoader only needs it for len()
        return 2**62


def make_loader(dataset: Dataset, sampler: PhaseBatchSampler, num_workers: int, pin_memory: bool) -> DataLoader:
    # A private generator: creating the loader's iterator would otherwise draw from the global
    # torch RNG, and a resumed run (which creates it after restoring the RNG) would diverge.
    return DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers, pin_memory=pin_memory,
                      collate_fn=collate_images, persistent_workers=num_workers > 0,
                      prefetch_factor=2 if num_workers > 0 else None,
                      generator=torch.Generator().manual_seed(sampler.seed))


def iter_batches(loader: DataLoader) -> Iterator:
    """Iterate ``loader``; a ``GankitError`` raised in a worker process reaches the caller as
    that one-line error instead of the worker's re-raised traceback."""
    it = iter(loader)
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
