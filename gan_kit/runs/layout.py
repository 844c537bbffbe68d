"""Where a run directory keeps its checkpoints: the one owner of their names.

A run directory holds ``checkpoints/`` with

- ``latest.pt``: the state a ``--resume`` continues from (every ``run.snapshot_ticks`` ticks, at
  each phase change, on an interrupt and at the end);
- ``phase-<i>-<res>px.pt``: each finished growth phase, shown at that phase (PGGAN's per-resolution
  snapshots);
- ``snapshot-<kimg:06d>-tick<N>.pt``: the snapshots ``run.keep_snapshots`` / ``keep_every_ticks``
  keep (hard links to the ``latest.pt`` of that tick).

Everything that writes, finds or lists a checkpoint - the run's ``save_checkpoint``, the
checkpointing plugin, ``--resume`` and ``--resume-if-exists``, ``gankit export``, the sweep
driver - asks ``CheckpointLayout`` (``run.checkpoints`` on a ``Run``), so a change of names or
folders is made here alone. The file format is ``gan_kit.runs.checkpoint``'s.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import attrs

from gan_kit.base.phase import Phase

__all__ = ["CheckpointLayout", "FOLDER", "LATEST"]

#: The folder of a run directory that holds its checkpoints.
FOLDER = "checkpoints"
#: The name (without ``.pt``) of the checkpoint a resume continues from.
LATEST = "latest"

_SNAPSHOT = re.compile(r"snapshot-(\d{6})-tick(\d+)\.pt$")


@attrs.frozen
class CheckpointLayout:
    """The checkpoint files of the run directory ``out_dir`` (paths only; nothing is read)."""

    out_dir: Path = attrs.field(converter=Path)

    @property
    def folder(self) -> Path:
        return self.out_dir / FOLDER

    @property
    def latest(self) -> Path:
        """``checkpoints/latest.pt``."""
        return self.path(LATEST)

    def path(self, name: str) -> Path:
        """``checkpoints/<name>.pt``."""
        return self.folder / f"{name}.pt"

    def phase(self, phase: Phase) -> Path:
        """The checkpoint of a finished growth phase, ``checkpoints/phase-<i>-<res>px.pt``."""
        return self.path(f"phase-{phase.index}-{phase.resolution}px")

    def snapshot(self, cur_nimg: int, tick: int) -> Path:
        """A kept snapshot, ``checkpoints/snapshot-<kimg:06d>-tick<N>.pt`` (kimg rounded down)."""
        return self.path(f"snapshot-{cur_nimg // 1000:06d}-tick{tick}")

    def snapshots(self) -> list[tuple[int, Path]]:
        """The kept snapshots as ``(tick, path)``, oldest first; ``[]`` without the folder."""
        if not self.folder.is_dir():
            return []
        return sorted((int(m.group(2)), p) for p in self.folder.iterdir() if (m := _SNAPSHOT.match(p.name)))

    @staticmethod
    def companions(checkpoint: Path) -> list[Path]:
        """``checkpoint`` and the files saved beside it under its name with another suffix
        (``latest.pt``, ``latest.json``, ...), those that exist."""
        checkpoint = Path(checkpoint)
        if not checkpoint.parent.is_dir():
            return []
        return sorted(p for p in checkpoint.parent.iterdir() if p.stem == checkpoint.stem and p.is_file())

    def link(self, source: Path, target: Path) -> None:
        """Make ``target`` the checkpoint ``source`` - a hard link (a copy where links are not
        supported), each file replaced atomically - with every file saved beside it under the
        same name (``companions``): a kept snapshot or a phase checkpoint is then whole, whatever
        files a save writes."""
        source, target = Path(source), Path(target)
        for file in self.companions(source):
            _link(file, target.with_suffix(file.suffix))

    def remove(self, checkpoint: Path) -> None:
        """Delete ``checkpoint`` and the files saved beside it (``companions``)."""
        for file in self.companions(checkpoint):
            file.unlink()

    @staticmethod
    def run_dir_of(checkpoint: Path) -> Path | None:
        """The run directory a checkpoint file lies in (``RUN/checkpoints/x.pt`` -> ``RUN``), or
        None when the file is not in a run's checkpoint folder."""
        checkpoint = Path(checkpoint)
        return checkpoint.parent.parent if checkpoint.parent.name == FOLDER else None


def _link(source: Path, target: Path) -> None:
    tmp = target.parent / f".{target.name}.tmp"
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
