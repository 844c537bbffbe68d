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

import ctypes
import platform
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
RETAIN_BYTES = 1 << 30


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to ``RETAIN_BYTES`` (1 GiB) for this process (and
    the processes it forks later). Returns True when applied; False, changing nothing, where the C
    library is not glibc (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, RETAIN_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, RETAIN_BYTES))
