"""Feeding real images: the in-memory and on-disk image datasets (optionally labelled, optionally
doubled with mirrored copies), batch collation, a resumable batch sampler whose batch size follows
the growth schedule, and the data loader (one-line errors from its worker processes too).

Dataset contract (every built-in dataset): ``len(ds)`` items; ``ds.num_classes`` (0 when the set
has no labels) and ``ds.labels`` (``int64 [N]`` class indices in ``[0, num_classes)``, or None).
An item is a float image ``[C, H, W]`` in [-1, 1], or ``(image, label)`` with ``label`` a 0-dim
``int64`` tensor when the set is labelled; ``ds.__getitems__(indices)`` fetches a batch in one
indexing operation: ``images [N, C, H, W]``, or ``(images, labels [N])`` when labelled.
"""

from __future__ import annotations

import atexit
import functools
import logging
import multiprocessing
import multiprocessing.util  # noqa: F401  (its exit handler must be registered before ours)
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from gan_kit.errors import GankitError
from gan_kit.imageio import DECODE_ERRORS, BoxFn, load_image, reason

log = logging.getLogger("gankit.data")


# ------------------------------------------------------------------------------ datasets --


def check_labels(labels: torch.Tensor | None, n: int, num_classes: int) -> torch.Tensor | None:
    """``labels`` as a contiguous ``int64 [n]`` tensor of values in ``[0, num_classes)``, or None.

    Raises ValueError (a factory's bug, not a user error) for another shape or a value out of range.
    """
    if labels is None:
        if num_classes:
            raise ValueError(f"num_classes = {num_classes} given without labels")
        return None
    labels = torch.as_tensor(labels).to(torch.int64).contiguous()
    if labels.shape != (n,):
        raise ValueError(f"expected labels of shape ({n},), got {tuple(labels.shape)}")
    if n and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{int(labels.min())}, {int(labels.max())}]")
    return labels


class ImageDataset(Dataset):
    """Base of the built-in datasets: ``labels`` / ``num_classes`` and the item type above."""

    labels: torch.Tensor | None = None
    num_classes: int = 0

    def _set_labels(self, labels, num_classes: int) -> None:
        self.labels = check_labels(labels, len(self), num_classes)
        self.num_classes = int(num_classes) if self.labels is not None else 0

    def _item(self, image: torch.Tensor, i: int):
        return image if self.labels is None else (image, self.labels[i].clone())

    def _batch(self, images: torch.Tensor, idx: torch.Tensor):
        return images if self.labels is None else (images, self.labels[idx])


def _to_float(x: torch.Tensor) -> torch.Tensor:
    """``uint8`` images -> float in [-1, 1]."""
    return x.float().div_(127.5).sub_(1.0)


class TensorImages(ImageDataset):
    """In-memory float images ``[N, C, H, W]`` in [-1, 1], optionally with ``labels [N]``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor | None = None, num_classes: int = 0):
        self.images = images.contiguous()
        self._set_labels(labels, num_classes)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int):
        return self._item(self.images[i], i)

    def __getitems__(self, indices: list[int]):
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self._batch(self.images[idx], idx)


class UInt8Images(ImageDataset):
    """In-memory ``uint8 [N, C, H, W]`` images served as float in [-1, 1] (a quarter of the memory
    of float images), optionally with ``labels [N]``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor | None = None, num_classes: int = 0):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"expected uint8 [N,C,H,W] images, got {images.dtype} {tuple(images.shape)}")
        self.images = images.contiguous()
        self._set_labels(labels, num_classes)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int):
        return self._item(_to_float(self.images[i]), i)

    def __getitems__(self, indices: list[int]):
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self._batch(_to_float(self.images[idx]), idx)


class FileImages(ImageDataset):
    """Images decoded from files on every access (``gan_kit.imageio.load_image``), for folders too
    large to hold in memory; optionally with ``labels [N]`` (one per file).

    A file that fails to decode is, with ``on_corrupt="skip"``, replaced by the next readable
    file (deterministically; its label comes with it) and reported once by name; with ``"error"``
    it raises GankitError naming ``key`` and the file.
    """

    def __init__(self, files: Sequence[Path], resolution: int, channels: int, on_corrupt: str = "skip",
                 box_fn: BoxFn | None = None, key: str = "data.path", labels: torch.Tensor | None = None,
                 num_classes: int = 0):
        self.files = list(files)
        self.resolution, self.channels, self.on_corrupt = resolution, channels, on_corrupt
        self.box_fn, self.key = box_fn, key
        self.bad: set[int] = set()
        self._set_labels(labels, num_classes)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        n = len(self.files)
        for k in range(n):
            j = (i + k) % n
            if j in self.bad:
                continue
            try:
                image = self._load(j)
            except DECODE_ERRORS as e:
                if self.on_corrupt == "error":
                    raise GankitError(f"{self.key}: cannot read image {self._describe(j)} ({reason(e)}); "
                                      f"{self.remedy} or set on_corrupt = \"skip\"") from None
                self.bad.add(j)
                log.warning("warning: %s: skipped unreadable image %s (%s)", self.key, self._describe(j), reason(e))
                continue
            return self._item(_to_float(image), j)
        raise GankitError(f"{self.key}: none of the {n} image files could be read")

    remedy = "remove the file"  # the first half of a corrupt file's fix in the one-line error

    def _load(self, j: int) -> torch.Tensor:  # uint8 [C, res, res]; raises one of DECODE_ERRORS
        return load_image(self.files[j], self.resolution, self.channels, self.box_fn)

    def _describe(self, j: int) -> str:  # item j's file as messages name it
        return str(self.files[j])


def _split(item) -> tuple[torch.Tensor, torch.Tensor | None]:
    return (item[0], item[1]) if isinstance(item, (tuple, list)) else (item, None)


class XFlip(Dataset):
    """``base`` followed by its mirror image: ``2 N`` items, item ``i >= N`` is item ``i - N``
    flipped left-right (along W), with the same label. Deterministic: it doubles the data set
    rather than flipping at random (stylegan2-ada-pytorch's ``--mirror``; Karras et al. 2020,
    "Training Generative Adversarial Networks with Limited Data", sec. 4: x-flips of the data set
    are a non-leaking augmentation). Other attributes (``files``, ``classes``, ...) are ``base``'s.
    """

    def __init__(self, base: Dataset):
        self.base = base
        self.n = len(base)
        self.num_classes = int(getattr(base, "num_classes", 0))
        labels = getattr(base, "labels", None)
        self.labels = None if labels is None else torch.cat([labels, labels])

    def __getattr__(self, name: str) -> Any:
        if name == "base" or name.startswith("__"):  # unpickling asks before base is set
            raise AttributeError(name)
        return getattr(self.base, name)

    def __len__(self) -> int:
        return 2 * self.n

    def __getitem__(self, i: int):
        if not -2 * self.n <= i < 2 * self.n:
            raise IndexError(f"index {i} out of range for {2 * self.n} items")
        i %= 2 * self.n
        item = self.base[i % self.n]
        if i < self.n:
            return item
        image, label = _split(item)
        return image.flip(-1) if label is None else (image.flip(-1), label)

    def __getitems__(self, indices: list[int]):
        idx = torch.as_tensor(indices, dtype=torch.long) % (2 * self.n)
        src = (idx % self.n).tolist()
        if hasattr(self.base, "__getitems__"):
            images, labels = _split(self.base.__getitems__(src))
        else:
            images, labels = collate_images_labels([self.base[j] for j in src])
        flipped = (idx >= self.n).view(-1, *([1] * (images.ndim - 1)))
        images = torch.where(flipped, images.flip(-1), images)
        return images if labels is None else (images, labels)


def mirrored(dataset: Dataset, xflip: bool) -> Dataset:
    """``XFlip(dataset)`` when ``xflip``, else ``dataset`` itself."""
    return XFlip(dataset) if xflip else dataset


# ----------------------------------------------------------------------------- collation --


def collate_images(batch) -> torch.Tensor:
    """Images ``[N, C, H, W]`` of a batch: ``batch`` is what a dataset's ``__getitems__`` gave
    (images, or ``(images, labels)``) or a list of items (images or ``(image, label)``);
    labels are dropped."""
    return collate_images_labels(batch)[0]


def collate_images_labels(batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(images [N, C, H, W], labels int64 [N] or None)`` of a batch (see ``collate_images``);
    labels is None for an unlabelled set."""
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, tuple) and len(batch) == 2 and isinstance(batch[0], torch.Tensor) and batch[0].ndim == 4:
        return batch[0], batch[1]  # a labelled __getitems__ batch
    pairs = [_split(b) for b in batch]
    images = torch.stack([p[0] for p in pairs])
    if any(p[1] is None for p in pairs):
        return images, None
    return images, torch.stack([torch.as_tensor(p[1], dtype=torch.int64) for p in pairs])


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


class _WorkerSide(Dataset):
    """Runs in the worker processes: fetches a batch from ``dataset`` (its ``__getitems__`` when
    it has one) and returns a GankitError as a ``_WorkerError`` value instead of raising it."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i]

    def __getitems__(self, indices: list[int]):
        try:
            if hasattr(self.dataset, "__getitems__"):
                return self.dataset.__getitems__(indices)
            return [self.dataset[i] for i in indices]
        except GankitError as e:
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


def make_loader(dataset: Dataset, sampler: PhaseBatchSampler, num_workers: int, pin_memory: bool,
                with_labels: bool = False) -> GankitLoader:
    """The training loader: batches of ``sampler``'s indices, collated by ``collate_images``
    (images ``[N, C, H, W]``) or, with ``with_labels``, ``collate_images_labels`` (``(images,
    labels)``, labels None for an unlabelled set). With ``num_workers > 0`` a GankitError raised
    while fetching a batch in a worker is raised by the iterator as the same one-line error."""
    collate: Callable = collate_images_labels if with_labels else collate_images
    if num_workers > 0:
        dataset, collate = _WorkerSide(dataset), functools.partial(_collate_or_error, collate)
    # A private generator: creating the loader's iterator would otherwise draw from the global
    # torch RNG, and a resumed run (which creates it after restoring the RNG) would diverge.
    return GankitLoader(dataset, batch_sampler=sampler, num_workers=num_workers, pin_memory=pin_memory,
                        collate_fn=collate, persistent_workers=num_workers > 0,
                        worker_init_fn=_ignore_interrupts if num_workers > 0 else None,
                        prefetch_factor=2 if num_workers > 0 else None,
                        generator=torch.Generator().manual_seed(sampler.seed))
