"""Counting host-device synchronisations, on any device (the CPU included).

A CUDA program runs ahead of the GPU until the host needs a value the GPU computes: ``.item()``,
``float(t)``, ``bool(t)`` / ``if t:``, ``.tolist()``, ``.cpu()`` / ``.numpy()``, an op whose
output shape depends on the data (``nonzero``, ``masked_select``, boolean indexing),
``torch.equal``. Each of these waits for every kernel queued before it (PyTorch docs, "CUDA
semantics: asynchronous execution"; ``torch.cuda.set_sync_debug_mode``). gankit's rule is at most
one per training iteration, at its boundary (docs/performance.md, "Host syncs").

``SyncCounter`` counts those calls wherever they run, so the rule is tested on a CPU: the aten ops
that read a value on the host (``aten::_local_scalar_dense`` behind ``.item()`` / ``float`` /
``bool``; ``nonzero``, ``masked_select``, ``equal``, ``unique``) under a ``TorchDispatchMode``,
and the tensor methods that copy to the host without an aten op on a CPU tensor (``.tolist()``,
``.cpu()``, ``.numpy()``) and ``torch.tensor(python data, device=...)`` (a pageable host-to-device
copy) under a ``TorchFunctionMode``. ``torch.cuda.set_sync_debug_mode`` is the
same check on a GPU, where it also sees pageable host-to-device copies.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["SyncCounter", "SYNC_OPS", "SYNC_METHODS"]

#: aten ops that make the host wait for a value on the device (their overload packets' names).
SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "equal", "unique", "_unique2",
                      "unique_consecutive", "nonzero_static"})
#: Tensor methods that copy to the host and are no aten op on a CPU tensor.
SYNC_METHODS = frozenset({"tolist", "cpu", "numpy"})
_FROM_HOST = (torch.tensor, torch.as_tensor)
#: Code that works on host tensors only, whatever the run's device (the data sampler's index
#: permutations, which never live on a GPU): not counted.
HOST_ONLY = frozenset({"PhaseBatchSampler.__iter__", "GankitLoader.__iter__"})


def _host_only() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if getattr(frame.f_code, "co_qualname", "") in HOST_ONLY:
            return True
        frame = frame.f_back
    return False


class _Ops(TorchDispatchMode):
    def __init__(self, counter: "SyncCounter"):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in SYNC_OPS:
            self.counter.record(f"aten::{name}")
        return func(*args, **(kwargs or {}))


class _Methods(TorchFunctionMode):
    def __init__(self, counter: "SyncCounter"):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNC_METHODS and args and isinstance(args[0], torch.Tensor):
            self.counter.record(f"Tensor.{name}")
        elif func in _FROM_HOST and (kwargs or {}).get("device") is not None and not (
                args and isinstance(args[0], torch.Tensor)):
            # torch.tensor(python data, device=...): a copy from pageable host memory, which on a
            # GPU waits for the work queued before it
            self.counter.record(f"torch.{name}(host data, device=...)")
        return func(*args, **(kwargs or {}))


class SyncCounter:
    """Counts host-device synchronisations while active (``with SyncCounter() as c:``).

    ``total``: the calls counted; ``by_kind``: a ``Counter`` of them by name
    (``"aten::_local_scalar_dense"``, ``"Tensor.tolist"``...); ``mark()`` returns the total so
    far (take it at each iteration boundary and difference). Counts the calling thread only (data
    loader workers are other processes) and leaves out ``HOST_ONLY`` code; ``paused()`` stops
    counting inside its block (what the measuring code itself reads).
    """

    def __init__(self) -> None:
        self.total = 0
        self.by_kind: collections.Counter[str] = collections.Counter()
        self._paused = 0
        self._stack: contextlib.ExitStack | None = None

    def record(self, kind: str) -> None:
        if not self._paused and not _host_only():
            self.total += 1
            self.by_kind[kind] += 1

    def mark(self) -> int:
        return self.total

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def __enter__(self) -> "SyncCounter":
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_Methods(self))
        self._stack.enter_context(_Ops(self))
        return self

    def __exit__(self, *exc) -> None:
        assert self._stack is not None
        self._stack.close()
        self._stack = None
