"""Per-sample random draws that do not depend on the number of processes.

gankit's rule for randomness under N processes (torchrun, ``gankit run --nproc N``): every
per-sample random number - latents z, augmentation parameters, StyleGAN2's noise maps, a second
latent for style mixing, a penalty's mixing weights, and any plugin's - is drawn for the *global*
batch and each process keeps its strided slice ``[rank::world_size]``. All processes share one
seed, so they draw the same global numbers, consume the same amount of RNG, and sample ``i`` of
the global batch gets the same draw whether it is trained by one process or by several (the data
sampler and the latents split each global batch the same way, see ``gan_kit.training.distributed``).

A per-batch draw (one number for the whole batch, e.g. a style-mixing cut-off) needs nothing:
every process draws it identically from the shared RNG.

The engine enters ``sharded(rank, world_size)`` around each training iteration; outside it (sample
grids, metrics, ``gankit sample``) the functions here draw exactly ``n`` rows, as plain
``torch.rand`` would. Plugins call them (``gan_kit.batch_rand`` / ``batch_randn`` /
``batch_randint``) wherever they would call ``torch.rand(n, ...)`` for ``n`` samples.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

__all__ = ["sharded", "current_shard", "batch_rand", "batch_randn", "batch_randint"]

_shard: tuple[int, int] = (0, 1)


@contextlib.contextmanager
def sharded(rank: int, world_size: int) -> Iterator[None]:
    """Inside the block, the ``batch_*`` draws are for a global batch of ``world_size`` processes,
    this one being ``rank`` (0-based). Re-entrant; restores the previous shard on exit."""
    global _shard
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"sharded: rank {rank} is not in [0, world_size = {world_size})")
    previous, _shard = _shard, (int(rank), int(world_size))
    try:
        yield
    finally:
        _shard = previous


def current_shard() -> tuple[int, int]:
    """``(rank, world_size)`` of the active ``sharded`` block, ``(0, 1)`` outside one."""
    return _shard


def _slice(x: torch.Tensor, rank: int | None, world_size: int | None) -> torch.Tensor:
    r, w = _resolve(rank, world_size)
    return x[r::w] if w > 1 else x


def _resolve(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if world_size is None:
        return _shard
    return int(rank or 0), int(world_size)


def batch_rand(n: int, *shape: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None,
               rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """``torch.rand(n, *shape)`` (uniform in [0, 1)) for this process's ``n`` samples, drawn for
    the global batch of ``n * world_size`` and sliced ``[rank::world_size]``.

    ``rank`` / ``world_size`` default to the active ``sharded`` block. Returns ``[n, *shape]``.
    """
    _, w = _resolve(rank, world_size)
    return _slice(torch.rand(n * w, *shape, device=device, dtype=dtype), rank, world_size)


def batch_randn(n: int, *shape: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """``torch.randn(n, *shape)`` (standard normal) for this process's ``n`` samples, drawn for
    the global batch and sliced as ``batch_rand``. Returns ``[n, *shape]``."""
    _, w = _resolve(rank, world_size)
    return _slice(torch.randn(n * w, *shape, device=device, dtype=dtype), rank, world_size)


def batch_randint(low: int, high: int, n: int, *shape: int, device: torch.device | str | None = None,
                  rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """``torch.randint(low, high, (n, *shape))`` (int64 in [low, high)) for this process's ``n``
    samples, drawn for the global batch and sliced as ``batch_rand``. Returns ``[n, *shape]``."""
    _, w = _resolve(rank, world_size)
    return _slice(torch.randint(low, high, (n * w, *shape), device=device), rank, world_size)
