"""Keep freed CPU tensor memory inside the process (glibc malloc), so a training iteration's large
activations are not handed back to the kernel when freed and page-faulted in again, zeroed, by
the next iteration.

glibc serves allocations above its mmap threshold (128 KiB, raised dynamically up to 32 MiB) with
``mmap`` and unmaps them on ``free``, and trims the top of the heap above its trim threshold.
A CPU GAN iteration allocates and frees hundreds of activation tensors of 1-64 MiB, so each
iteration pays one minor page fault per 4 KiB of them (153,000 per iteration at
``recipes/bench-pggan32.toml``'s 32x32 phase, about 6% of its time). ``mallopt`` (glibc's public
tuning call, the run-time form of the ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``
environment variables) raises both thresholds to 1 GiB: freed blocks stay in the heap and are
reused. The numbers computed do not change; the process's RSS stays near its peak instead of
falling between iterations. See docs/performance.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
RETAIN_BYTES = 1 << 30
FALLBACK_MMAP_BYTES = 32 << 20
DEFAULT_BYTES = 128 << 10  # glibc's initial mmap and trim thresholds


_retaining = False  # whether retain_freed_memory() took effect in this process


def _mallopt():
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)  # the C library this process already runs on
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return libc


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to ``RETAIN_BYTES`` (1 GiB) for this process (and
    the processes it forks later). Returns True when applied; False, changing nothing, where the C
    library is not glibc (macOS, Windows, musl)."""
    global _retaining
    libc = _mallopt()
    if libc is None:
        return False
    # glibc before 2.26 or so refuses an mmap threshold above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit
    # systems): fall back to that, which still keeps every activation below 32 MiB in the heap.
    mmap_set = libc.mallopt(M_MMAP_THRESHOLD, RETAIN_BYTES) or libc.mallopt(M_MMAP_THRESHOLD, FALLBACK_MMAP_BYTES)
    trim_set = libc.mallopt(M_TRIM_THRESHOLD, RETAIN_BYTES)
    _retaining = bool(mmap_set) and bool(trim_set)
    return _retaining


@contextlib.contextmanager
def ordinary_allocation():
    """Hand the free pages training kept back to the kernel (``malloc_trim``) and use glibc's
    default thresholds (128 KiB) inside the block; ``retain_freed_memory``'s thresholds return at
    the end. For a pass whose tensors have other shapes than training's (a metric over many
    images), which the kept blocks serve badly: with the retaining thresholds the heap grew by
    about that pass's peak (main job, 2 kimg: peak RSS 1.57 GB, 1.27 GB with this block, 1.29 GB
    without retaining at all). Does nothing unless ``retain_freed_memory`` took effect."""
    libc = _mallopt() if _retaining else None
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, DEFAULT_BYTES)
    libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_BYTES)
    libc.malloc_trim(0)
    try:
        yield
    finally:
        retain_freed_memory()
