"""Which real images each iteration gets and how they arrive: the resumable batch sampler whose
batch size follows the growth schedule (``PhaseBatchSampler``), and the training loader
(``make_loader``), whose worker processes' errors arrive as the same one-line errors and whose
workers end with training however it ends."""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import multiprocessing.util  # noqa: F401  (its exit handler must be registered before ours)
import os
import weakref
from typing import Callable, Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from gan_kit.training.data.datasets import collate_images, collate_images_labels, has_uint8_batches
from gan_kit.base.errors import GankitError

__all__ = ["index_at", "PhaseBatchSampler", "GankitLoader", "iter_batches", "make_loader", "auto_num_workers"]


# --------------------------------------------------------------------------------- sampler --


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


# ---------------------------------------------------------------------------------- loader --


class _WorkerError:
    """A GankitError raised in a loader worker, sent back to the main process in place of the
    batch. torch's own path would re-raise it there with the worker's traceback folded into the
    message (``Caught GankitError in DataLoader worker process 0. Original Traceback ...``)."""

    def __init__(self, error: GankitError):
        self.cls, self.message = type(error), str(error)

    def error(self) -> GankitError:
        """The error to raise: its own class when that rebuilds the same message from it, else a
        GankitError with the message (RecipeError, for one, takes a list of problems)."""
        try:
            rebuilt = self.cls(self.message)
        except Exception:
            return GankitError(self.message)
        return rebuilt if str(rebuilt) == self.message else GankitError(self.message)


class _Batches(Dataset):
    """What the loader indexes: fetches a batch from ``dataset`` in one call (its ``uint8_items``
    with ``uint8``, else its ``__getitems__`` when it has one, else item by item). With
    ``catch`` (in worker processes) a GankitError comes back as a ``_WorkerError`` value instead
    of being raised."""

    def __init__(self, dataset: Dataset, uint8: bool, catch: bool):
        self.dataset, self.uint8, self.catch = dataset, uint8, catch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i]

    def __getitems__(self, indices: list[int]):
        try:
            if self.uint8:
                return self.dataset.uint8_items(indices)
            if hasattr(self.dataset, "__getitems__"):
                return self.dataset.__getitems__(indices)
            return [self.dataset[i] for i in indices]
        except GankitError as e:
            if not self.catch:
                raise
            return _WorkerError(e)


def _collate_or_error(collate: Callable, batch):
    if isinstance(batch, _WorkerError):
        return batch
    try:
        return collate(batch)
    except GankitError as e:
        return _WorkerError(e)


def iter_batches(loader: Iterable) -> Iterator:
    """Iterate ``loader``'s batches; a GankitError that a worker process raised (sent back by a
    ``make_loader`` loader) is raised here as that same one-line error, as with no workers."""
    for batch in loader:
        if isinstance(batch, _WorkerError):
            raise batch.error() from None
        yield batch


def _ignore_interrupts(worker_id: int) -> None:
    """Loader workers ignore SIGINT/SIGTERM: Ctrl-C (and `timeout`'s SIGTERM) reach the whole
    process group, and the main process finishes its iteration and writes a checkpoint with batches
    the workers still serve. Because a worker ignores SIGTERM, the main process must end it itself
    (``GankitLoader.close``, also at interpreter exit): multiprocessing's own exit handler
    terminates daemon children with SIGTERM and then joins them, which would wait forever. A worker
    whose main process died exits on its own (torch's worker watchdog)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class GankitLoader(DataLoader):
    """A DataLoader whose iterator is ``iter_batches``: errors from workers arrive as one line;
    ``close()`` ends its worker processes."""

    def __iter__(self):
        _reap_workers()
        iterator = super().__iter__()
        for worker in getattr(iterator, "_workers", ()):  # an iterator with worker processes
            _WORKERS[worker.pid] = weakref.ref(iterator)
        return iter_batches(iterator)

    def close(self) -> None:
        """End the worker processes now (idempotent; iterating again starts new ones). The engine
        calls it when training ends, however it ends."""
        iterator = getattr(self, "_iterator", None)  # the persistent-workers iterator
        self._iterator = None
        if iterator is not None:
            _end_workers(iterator)


def _end_workers(iterator) -> None:
    """End a multi-process iterator's workers: torch's own shutdown (what its ``__del__`` does:
    stop message, join, unregister from torch's SIGCHLD check), then a kill for a worker that did
    not stop within torch's wait (stuck in ``__getitem__``): it ignores SIGTERM."""
    iterator._shutdown_workers()
    for worker in getattr(iterator, "_workers", ()):
        if worker.is_alive():
            worker.kill()
            worker.join()


# Worker pid -> its iterator. Our workers ignore SIGTERM, so nothing but us ends a worker whose
# parent lives on: when an iterator is collected as part of a reference cycle (an exception's
# traceback makes one), its queues may be finalized before its __del__ sends the stop message,
# and the worker idles forever; at interpreter exit multiprocessing would then join it forever.
_WORKERS: dict[int, weakref.ref] = {}


def _reap_workers(at_exit: bool = False) -> None:
    """Kill the workers whose iterator is gone (and, ``at_exit``, first end every live
    iterator's workers the clean way, then kill whatever is left)."""
    if at_exit:
        iterators = {id(it): it for it in (ref() for ref in _WORKERS.values()) if it is not None}
        for iterator in iterators.values():
            _end_workers(iterator)
    for process in multiprocessing.active_children():  # also reaps children that ended
        ref = _WORKERS.get(process.pid)
        if ref is not None and (at_exit or ref() is None):
            process.kill()
            process.join()
    alive = {process.pid for process in multiprocessing.active_children()}
    for pid in list(_WORKERS):
        if pid not in alive:
            del _WORKERS[pid]


# atexit runs handlers last-registered-first: registered after multiprocessing's (imported above),
# this one ends the workers before multiprocessing's handler joins them.
atexit.register(_reap_workers, at_exit=True)


def auto_num_workers(device_type: str, local_world_size: int = 1, cpus: int | None = None,
                     dataset: Dataset | None = None) -> int:
    """``run.num_workers = "auto"``: no worker process on the CPU (training uses every core, and
    a worker would take cores from it), nor for a ``dataset`` held in memory (its
    ``decodes_per_item`` is false: indexing it takes microseconds, a worker would only add a copy
    through shared memory); else, on CUDA, the cores this process's share leaves after the main
    process (``cpus // local_world_size - 1``), at least 1 and at most 8 (past that a decoding
    loader outruns a GPU step; stylegan2-ada-pytorch's default is 3). A dataset that does not
    say (a plugin's) counts as decoding."""
    if device_type != "cuda" or not getattr(dataset, "decodes_per_item", True):
        return 0
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cpus // max(1, local_world_size) - 1))


def make_loader(dataset: Dataset, sampler: PhaseBatchSampler, num_workers: int, pin_memory: bool,
                with_labels: bool = False, uint8: bool = False) -> GankitLoader:
    """The training loader: batches of ``sampler``'s indices, collated by ``collate_images``
    (images ``[N, C, H, W]``) or, with ``with_labels``, ``collate_images_labels`` (``(images,
    labels)``, labels None for an unlabelled set). With ``uint8`` a dataset that has
    ``uint8_items`` (``has_uint8_batches``) gives ``uint8`` images (0..255), which the caller
    converts on its device (``to_float_images``); other datasets give their float images. With
    ``num_workers > 0`` a GankitError raised while fetching a batch in a worker is raised by the
    iterator as the same one-line error; workers persist across iterations, prefetch 2 batches
    each, and ``pin_memory`` puts each batch in page-locked memory so the copy to a GPU can be
    ``non_blocking``."""
    collate: Callable = collate_images_labels if with_labels else collate_images
    if num_workers > 0:
        collate = functools.partial(_collate_or_error, collate)
    dataset = _Batches(dataset, uint8=uint8 and has_uint8_batches(dataset), catch=num_workers > 0)
    # A private generator: creating the loader's iterator would otherwise draw from the global
    # torch RNG, and a resumed run (which creates it after restoring the RNG) would diverge.
    return GankitLoader(dataset, batch_sampler=sampler, num_workers=num_workers, pin_memory=pin_memory,
                        collate_fn=collate, persistent_workers=num_workers > 0,
                        worker_init_fn=_ignore_interrupts if num_workers > 0 else None,
                        prefetch_factor=2 if num_workers > 0 else None,
                        generator=torch.Generator().manual_seed(sampler.seed))
