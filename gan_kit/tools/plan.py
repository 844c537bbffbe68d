"""What ``gankit run --dry-run`` shows of a built run beside its recipe (the command prints it:
``gan_kit.cli.run``): each network's parameters, with how many are frozen, and each growth
phase's batches - the global batch, the images per process and the rounds of
``growth.batch_gpu`` images each optimizer step runs them in (gradient accumulation,
stylegan2-ada-pytorch's ``--batch-gpu``)."""

from __future__ import annotations

from typing import Iterable

import attrs
from torch import nn

from gan_kit.base.phase import Phase
from gan_kit.training.step.rounds import rounds_for

__all__ = ["ParameterCount", "parameter_count", "PhasePlan", "phase_plan"]


@attrs.frozen
class ParameterCount:
    """A network's parameters: ``total`` scalars, ``frozen`` of them with ``requires_grad``
    False (FreezeD's blocks, a pretrained part loaded with ``gan_kit.load_frozen``: never
    stepped). ``str()``: ``"1,234 parameters (1,000 frozen)"``, without the part in brackets
    when none is frozen."""

    total: int
    frozen: int

    def __str__(self) -> str:
        return f"{self.total:,} parameters" + (f" ({self.frozen:,} frozen)" if self.frozen else "")


def parameter_count(net: nn.Module) -> ParameterCount:
    """The ``ParameterCount`` of ``net`` (each shared parameter counted once)."""
    params = list(net.parameters())
    return ParameterCount(total=sum(p.numel() for p in params),
                          frozen=sum(p.numel() for p in params if not p.requires_grad))


@attrs.frozen
class PhasePlan:
    """One growth phase as the dry run shows it: ``index``, ``resolution`` (px), where it starts
    and how long its fade-in is (kimg), ``batch_size`` (the global batch, images per D step),
    ``per_process`` (its share on each of the processes), ``batch_gpu`` (``growth.batch_gpu`` at
    this phase, None when unset), ``rounds`` (forward / backward rounds per optimizer step:
    ``per_process / batch_gpu``, 1 without accumulation) and ``lr_scale``."""

    index: int
    resolution: int
    start_kimg: float
    fade_kimg: float
    batch_size: int
    per_process: int
    batch_gpu: int | None
    rounds: int
    lr_scale: float


def phase_plan(phases: Iterable[Phase], processes: int = 1) -> list[PhasePlan]:
    """The ``PhasePlan`` of each of ``phases`` (a run's ``phases()``) trained by ``processes``
    processes (the global batch split evenly: ``build_run`` refuses one that does not split)."""
    out = []
    for ph in phases:
        per = ph.batch_size // max(1, processes)
        out.append(PhasePlan(index=ph.index, resolution=ph.resolution, start_kimg=ph.start_nimg / 1000,
                             fade_kimg=ph.fade_nimg / 1000, batch_size=ph.batch_size, per_process=per,
                             batch_gpu=ph.batch_gpu, rounds=rounds_for(per, ph.batch_gpu), lr_scale=ph.lr_scale))
    return out
