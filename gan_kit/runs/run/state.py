"""A ``Run``'s state in a checkpoint (``RunCheckpoints``, a part of ``gan_kit.runs.run.Run``): what
``state_dict`` saves - networks, optimizers, GradScaler, stateful components, counters, the
running tick's sums, the RNG streams - ``load_state_dict`` restores exactly, and
``save_checkpoint`` writing it atomically (``gan_kit.runs.checkpoint``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit.base.errors import TrainingError
from gan_kit.plugin_api.ownership import frozen_files, load_without_frozen, without_frozen
from gan_kit.base.phase import Phase
from gan_kit.recipe import recipe_to_toml
from gan_kit.runs.layout import CheckpointLayout
from gan_kit.base.version import __version__

__all__ = ["RunCheckpoints"]


class RunCheckpoints:
    """``state_dict`` / ``load_state_dict`` (exact resume) and ``save_checkpoint`` (rank 0,
    atomic, never with non-finite weights; fires ``checkpoint_saved``)."""

    def _stateful(self) -> dict[str, Any]:
        """Components with state of their own (a penalty's running mean, an augmentation's p)."""
        out = {}
        for i, wp in enumerate(self.penalties):
            if hasattr(wp.penalty, "state_dict"):
                out[f"penalty[{i}].{wp.name}"] = wp.penalty
        for name in ("strategy", "loss", "augment"):
            comp = getattr(self, name)
            if hasattr(comp, "state_dict"):
                out[name] = comp
        return out

    def frozen_files(self) -> dict[str, Any]:
        """``{"G.<module>" / "D.<module>": FrozenFile}``: G's and D's frozen sub-networks loaded
        from local files (``gan_kit.load_frozen``), which checkpoints record by path and digest."""
        return {f"{label}.{name}" if name else label: record
                for label, net in (("G", self.G), ("D", self.D)) for name, record in frozen_files(net).items()}

    def state_dict(self, rng: dict | None = None) -> dict:
        """Everything ``load_state_dict`` restores. ``rng``: ``checkpoint.rng_state``'s dict
        already gathered from every process (``save_checkpoint``); taken here otherwise."""
        return {
            "gankit_version": __version__,
            "channels": self.channels,
            "num_classes": self.num_classes,
            "class_names": self.class_names,
            "recipe": recipe_to_toml(self.recipe),
            # a frozen sub-network loaded from a file is recorded by path and digest, not copied
            "G": without_frozen(self.G.state_dict(), self.G),
            "D": without_frozen(self.D.state_dict(), self.D),
            "G_ema": without_frozen(self.G_ema.state_dict(), self.G_ema),
            "frozen_files": {k: attrs.asdict(v) for k, v in self.frozen_files().items()},
            "opt_G": self.opt_G.state_dict(),
            "opt_D": self.opt_D.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "components": {k: c.state_dict() for k, c in self._stateful().items()},
            "cur_nimg": self.cur_nimg,
            "step": self.step,
            "d_step": self.d_step,
            "tick": self.tick,
            "skipped_steps": self.skipped_steps,
            "train_seconds": self.train_seconds,
            "tick_stats": {k: [v, self.tick_counts[k]] for k, v in self.tick_sums.items()},
            "phase": _phase_dict(self.phase),
            "rng": rng if rng is not None else ckpt.rng_state(self.device, self.world_size),
            # What the data held, so a resume may read it from another path (gan_kit.training.data.digest).
            "data_digest": self.data_digest(),
        }

    def data_digest(self) -> str | None:
        """The content digest of the run's data set (``gan_kit.training.data.data_digest``), computed once."""
        if not hasattr(self, "_data_digest"):
            from gan_kit.training.data import data_digest

            self._data_digest = data_digest(self.dataset)
        return self._data_digest

    def load_state_dict(self, state: dict) -> None:
        load_without_frozen(self.G, state["G"])
        load_without_frozen(self.D, state["D"])
        load_without_frozen(self.G_ema, state["G_ema"])
        self.opt_G.load_state_dict(state["opt_G"])
        self.opt_D.load_state_dict(state["opt_D"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        saved = state.get("components", {})
        for key, comp in self._stateful().items():
            if key in saved:
                comp.load_state_dict(saved[key])
        self.cur_nimg = int(state["cur_nimg"])
        self.step = int(state["step"])
        self.d_step = int(state["d_step"])
        self.tick = int(state["tick"])
        self.skipped_steps = int(state["skipped_steps"])
        self.train_seconds = float(state.get("train_seconds", 0.0))  # absent in checkpoints before max_minutes
        self.tick_sums.clear()
        self.tick_counts.clear()
        for k, (v, n) in state.get("tick_stats", {}).items():
            self.tick_sums[k], self.tick_counts[k] = float(v), int(n)
        ckpt.set_rng_state(state["rng"], self.device, self.rank)

    @property
    def checkpoints(self) -> CheckpointLayout:
        """Where this run's checkpoint files go (``gan_kit.runs.layout``)."""
        return CheckpointLayout(self.out_dir)

    def save_checkpoint(self, path: Path | str | None = None, phase: Phase | None = None) -> Path | None:
        """Write the run's state to ``path`` (default ``run.checkpoints.latest``; a str is a
        name in the checkpoint folder: ``"latest"`` -> ``checkpoints/latest.pt``) atomically,
        rank 0 only, and fire ``checkpoint_saved``. Returns the path (None on other ranks).

        ``phase``: the phase the weights are to be shown at (``gankit sample`` / ``eval``), when
        not the current one: a phase's own checkpoint, written as the next phase starts, records
        the finished phase (resuming goes by ``cur_nimg``, not by this). Refuses
        (``TrainingError``) to write weights that hold NaN/inf: a checkpoint is always one a run
        can continue from.
        """
        target = (self.checkpoints.latest if path is None
                  else self.checkpoints.path(path) if isinstance(path, str) else Path(path))
        rng = ckpt.rng_state(self.device, self.world_size)  # a collective on CUDA: before rank 0 alone goes on
        if not self.is_main:
            return None
        bad = [label for label, net in (("G", self.G), ("D", self.D), ("G_ema", self.G_ema))
               if not all(torch.isfinite(t).all() for t in net.state_dict().values() if t.is_floating_point())]
        if bad:
            where = f" (last good checkpoint: {self.last_checkpoint})" if self.last_checkpoint else ""
            raise TrainingError(f"step {self.step}: non-finite weights in {' and '.join(bad)}; not writing "
                                f"{_shown(target, self.out_dir)}{where}")
        state = self.state_dict(rng)
        if phase is not None:
            state["phase"] = _phase_dict(phase)
        path = ckpt.save_atomic(state, target)
        self.last_checkpoint = path
        self.hook.checkpoint_saved(run=self, path=path)
        return path


def _shown(path: Path, out_dir: Path) -> Path:
    """``path`` relative to the run directory when it lies in it (``checkpoints/latest.pt``)."""
    try:
        return path.relative_to(out_dir)
    except ValueError:
        return path


def _phase_dict(phase: Phase | None) -> dict | None:
    if phase is None:
        return None
    import attrs

    return {k: (float(v) if isinstance(v, float) else v) for k, v in attrs.asdict(phase).items()}
