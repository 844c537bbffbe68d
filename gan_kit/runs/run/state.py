"""A run's state in a checkpoint: what ``state_dict(run)`` saves - networks, optimizers,
GradScaler, stateful components, counters, the running tick's sums, the RNG streams -
``load_state_dict(run, state)`` restores exactly, and ``save_checkpoint(run, ...)`` writing it
atomically (``gan_kit.runs.checkpoint``). ``run`` is a ``gan_kit.runs.run.Run``; the functions
read and set its documented attributes only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit.base.errors import TrainingError
from gan_kit.plugin_api.ownership import frozen_files as frozen_files_of, load_without_frozen, without_frozen
from gan_kit.base.phase import Phase
from gan_kit.recipe import recipe_to_toml
from gan_kit.base.version import __version__

__all__ = ["state_dict", "load_state_dict", "frozen_files", "save_checkpoint"]


def _stateful(run: Any) -> dict[str, Any]:
    """Components with state of their own (a penalty's running mean, an augmentation's p)."""
    out = {}
    for i, wp in enumerate(run.penalties):
        if hasattr(wp.penalty, "state_dict"):
            out[f"penalty[{i}].{wp.name}"] = wp.penalty
    for name in ("strategy", "loss", "augment"):
        comp = getattr(run, name)
        if hasattr(comp, "state_dict"):
            out[name] = comp
    return out


def frozen_files(run: Any) -> dict[str, Any]:
    """``{"G.<module>" / "D.<module>": FrozenFile}``: G's and D's frozen sub-networks loaded
    from local files (``gan_kit.load_frozen``), which checkpoints record by path and digest."""
    return {f"{label}.{name}" if name else label: record
            for label, net in (("G", run.G), ("D", run.D)) for name, record in frozen_files_of(net).items()}


def state_dict(run: Any, rng: dict | None = None) -> dict:
    """Everything ``load_state_dict`` restores. ``rng``: ``checkpoint.rng_state``'s dict
    already gathered from every process (``save_checkpoint``); taken here otherwise."""
    return {
        "gankit_version": __version__,
        "channels": run.channels,
        "num_classes": run.num_classes,
        "class_names": run.class_names,
        "recipe": recipe_to_toml(run.recipe),
        # a frozen sub-network loaded from a file is recorded by path and digest, not copied
        "G": without_frozen(run.G.state_dict(), run.G),
        "D": without_frozen(run.D.state_dict(), run.D),
        "G_ema": without_frozen(run.G_ema.state_dict(), run.G_ema),
        "frozen_files": {k: attrs.asdict(v) for k, v in frozen_files(run).items()},
        "opt_G": run.opt_G.state_dict(),
        "opt_D": run.opt_D.state_dict(),
        "scaler": run.scaler.state_dict() if run.scaler is not None else None,
        "components": {k: c.state_dict() for k, c in _stateful(run).items()},
        "cur_nimg": run.cur_nimg,
        "step": run.step,
        "d_step": run.d_step,
        "tick": run.tick,
        "skipped_steps": run.skipped_steps,
        "scaler_skipped_steps": run.scaler_skipped_steps,
        "lazy_retry": list(run.lazy_retry),
        "train_seconds": run.train_seconds,
        "tick_stats": {k: [v, run.tick_counts[k]] for k, v in run.tick_sums.items()},
        "phase": _phase_dict(run.phase),
        "rng": rng if rng is not None else ckpt.rng_state(run.device, run.world_size),
        # What the data held, so a resume may read it from another path (gan_kit.training.data.digest).
        "data_digest": run.data.digest(),
        "derived_from": run.derived_from,
    }


def load_state_dict(run: Any, state: dict) -> None:
    """Restore what ``state_dict`` saved (weights, optimizers, scaler, components, counters, the
    running tick's sums and this process's RNG streams) into ``run``, exactly."""
    load_without_frozen(run.G, state["G"])
    load_without_frozen(run.D, state["D"])
    load_without_frozen(run.G_ema, state["G_ema"])
    run.opt_G.load_state_dict(state["opt_G"])
    run.opt_D.load_state_dict(state["opt_D"])
    if run.scaler is not None and state.get("scaler"):
        run.scaler.load_state_dict(state["scaler"])
    saved = state.get("components", {})
    for key, comp in _stateful(run).items():
        if key in saved:
            comp.load_state_dict(saved[key])
    run.cur_nimg = int(state["cur_nimg"])
    run.step = int(state["step"])
    run.d_step = int(state["d_step"])
    run.tick = int(state["tick"])
    run.skipped_steps = int(state["skipped_steps"])
    run.scaler_skipped_steps = int(state.get("scaler_skipped_steps", 0))  # absent in older checkpoints
    run.lazy_retry = tuple(int(i) for i in state.get("lazy_retry", ()))
    run.derived_from = state.get("derived_from")
    run.train_seconds = float(state.get("train_seconds", 0.0))  # absent in checkpoints before max_minutes
    run.tick_sums.clear()
    run.tick_counts.clear()
    for k, (v, n) in state.get("tick_stats", {}).items():
        run.tick_sums[k], run.tick_counts[k] = float(v), int(n)
    ckpt.set_rng_state(state["rng"], run.device, run.rank)


def save_checkpoint(run: Any, path: Path | str | None = None, phase: Phase | None = None) -> Path | None:
    """Write the run's state to ``path`` (default ``run.checkpoints.latest``; a str is a
    name in the checkpoint folder: ``"latest"`` -> ``checkpoints/latest.pt``) atomically,
    rank 0 only, and fire ``checkpoint_saved``. Returns the path (None on other ranks).

    ``phase``: the phase the weights are to be shown at (``gankit sample`` / ``eval``), when
    not the current one: a phase's own checkpoint, written as the next phase starts, records
    the finished phase (resuming goes by ``cur_nimg``, not by this). Refuses
    (``TrainingError``) to write weights that hold NaN/inf: a checkpoint is always one a run
    can continue from.
    """
    target = (run.checkpoints.latest if path is None
              else run.checkpoints.path(path) if isinstance(path, str) else Path(path))
    rng = ckpt.rng_state(run.device, run.world_size)  # a collective on CUDA: before rank 0 alone goes on
    if not run.is_main:
        return None
    bad = [label for label, net in (("G", run.G), ("D", run.D), ("G_ema", run.G_ema))
           if not all(torch.isfinite(t).all() for t in net.state_dict().values() if t.is_floating_point())]
    if bad:
        where = f" (last good checkpoint: {run.last_checkpoint})" if run.last_checkpoint else ""
        raise TrainingError(f"step {run.step}: non-finite weights in {' and '.join(bad)}; not writing "
                            f"{_shown(target, run.out_dir)}{where}")
    state = state_dict(run, rng)
    if phase is not None:
        state["phase"] = _phase_dict(phase)
    path = ckpt.save_atomic(state, target)
    run.last_checkpoint = path
    run.hook.checkpoint_saved(run=run, path=path)
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
    return {k: (float(v) if isinstance(v, float) else v) for k, v in attrs.asdict(phase).items()}
