"""An iteration's stats, kept on the device until someone reads them (``StepStats``).

stylegan2-ada-pytorch's ``torch_utils/training_stats.py`` is the model: the training loop
accumulates device tensors and moves them to the host once per tick. Here each iteration's
tensor stats (losses, penalties, ADA's p) and the non-finite policy's flags are stacked into one
device vector; the tick (``gan_kit.runs.engine.ticks.Ticks``) concatenates every iteration's vector
and reads them with one copy. A hook that reads a ``StepStats`` (``step_finished``) pays one sync
for that iteration (at its boundary); one that does not read it costs nothing.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import torch

__all__ = ["StepStats"]

#: The flag entries of an iteration's vector after its stats, in this order.
FLAGS = ("Grad/G", "Grad/D", "bad", "scaler_skipped")


class StepStats(Mapping[str, float]):
    """One iteration's stats as a read-only mapping of floats, materialised on first read.

    ``host``: the stats that are Python numbers already (and the ``Interrupt/...`` flags);
    ``keys_``: the names of the device stats, whose values are ``vector[:len(keys_)]``, followed
    by the flags ``FLAGS`` (1.0 = set). ``step`` / ``nimg`` / ``resolution``: where the iteration
    ended (for the non-finite message). After ``materialise`` (one host copy) the mapping holds
    the same entries a float dict did: a flagged gradient is ``Grad/G`` (``Grad/D``) = NaN.
    """

    def __init__(self, host: dict[str, float], keys: list[str], vector: torch.Tensor | None, *, step: int,
                 nimg: int, resolution: int):
        self.host, self.keys_, self.vector = host, keys, vector
        self.step, self.nimg, self.resolution = step, nimg, resolution
        self._floats: dict[str, float] | None = None
        self.flags: dict[str, bool] = {}

    def materialise(self, values: list[float] | None = None, *, replace: bool = False) -> dict[str, float]:
        """The floats (``values``: this iteration's vector already copied to the host by the
        tick; else one copy now). ``replace``: take ``values`` even if already read (the tick's
        averages over processes replace this process's own values)."""
        if self._floats is None or (replace and values is not None):
            if values is None:
                values = self.vector.cpu().tolist() if self.vector is not None else []
            n = len(self.keys_)
            out = dict(zip(self.keys_, values[:n]))
            flags = dict(zip(FLAGS, (v > 0 for v in values[n:])))
            self.flags = flags
            for net in ("G", "D"):
                if flags.get(f"Grad/{net}"):
                    out[f"Grad/{net}"] = float("nan")
            out.update(self.host)
            self._floats = out
        return self._floats

    @property
    def materialised(self) -> bool:
        return self._floats is not None

    def __getitem__(self, key: str) -> float:
        return self.materialise()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.materialise())

    def __len__(self) -> int:
        return len(self.materialise())

    def __repr__(self) -> str:
        return f"StepStats({self.materialise() if self.materialised else '<on the device>'})"


def stack_stats(raw: Mapping[str, Any], flags: list[torch.Tensor], device: torch.device
                ) -> tuple[dict[str, float], list[str], torch.Tensor]:
    """Split ``raw`` into host numbers and device tensors; stack the tensors (each a scalar) and
    ``flags`` (bool scalars, ``FLAGS`` order) into one float32 vector on ``device`` (no sync)."""
    host = {k: float(v) for k, v in raw.items() if not isinstance(v, torch.Tensor)}
    keys = [k for k, v in raw.items() if isinstance(v, torch.Tensor)]
    parts = [raw[k].detach().float().reshape(()).to(device, non_blocking=True) for k in keys]
    parts += [f.to(device).float().reshape(()) for f in flags]
    return host, keys, torch.stack(parts)
