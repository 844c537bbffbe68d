"""Checkpoints: one file per save, written atomically, loaded with ``weights_only=True``.

A save writes to a temporary file in the same folder, flushes and fsyncs it, renames it over
the target (atomic on POSIX) and fsyncs the folder, so a crash or SIGKILL mid-write leaves the
previous checkpoint intact.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gan_kit.errors import CheckpointError

#: Bumped whenever the layout of the saved dict changes incompatibly.
FORMAT_VERSION = 1
MAGIC = "gankit-checkpoint"


def save_atomic(state: dict, path: str | Path) -> Path:
    """Write ``state`` (with the format marker added) to ``path`` atomically; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"magic": MAGIC, "format_version": FORMAT_VERSION, **state}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; a checkpoint is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def load(path: str | Path, map_location: Any = "cpu") -> dict:
    """Load a gankit checkpoint safely (``weights_only=True``).

    Raises ``CheckpointError`` with one line for a missing, truncated, foreign or newer-format
    file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found (list the run's checkpoints/ folder)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if first.startswith("Weights only load failed"):
            first = "it holds objects a safe (weights_only) load refuses"
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or foreign file: {first[:200]})") from None
    if not isinstance(state, dict) or state.get("magic") != MAGIC:
        raise CheckpointError(f"{path}: not a gankit checkpoint (no '{MAGIC}' marker)")
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format {version} is newer than this gankit reads ({FORMAT_VERSION}); upgrade gankit")
    return state


def rng_state() -> dict:
    """Every RNG state (torch CPU, CUDA when present, numpy, python), weights_only-safe."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": _py_state(random.getstate()),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _py_state(s):
    return [s[0], list(s[1]), s[2]]


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def load_generator(path: str | Path, device: str | torch.device = "cpu", state: dict | None = None):
    """G_ema of a checkpoint, rebuilt from the recipe saved in it and set to the saved phase.

    Returns ``(G_ema, phase, recipe, architecture)`` (the built ``Architecture`` component:
    ``latent_dim``, ``supports_truncation``; ``architecture.context.num_classes`` > 0 for a
    class-conditional G, which takes ``G(z, labels)``). ``state``: the checkpoint already loaded
    from ``path`` (read once by a caller that needs more of it). Raises ``CheckpointError`` /
    ``RecipeError``.
    """
    from gan_kit.components import BuildContext, set_phase
    from gan_kit.phase import Phase
    from gan_kit.recipe import load_recipe

    if state is None:
        state = load(path, map_location=device)
    recipe, plugins = load_recipe(Path(f"{path}[recipe]"), text=state["recipe"])
    channels = int(state["channels"])
    ctx = BuildContext(resolution=recipe.resolution, channels=channels, recipe=recipe,
                       num_classes=int(state.get("num_classes", 0)))
    arch = plugins.registry.get("architecture", recipe.architecture.name).factory(recipe.architecture.options, ctx)
    G, _ = arch.build(recipe.resolution, channels)
    from gan_kit.networks import apply_spectral_norm, initialise
    from gan_kit.ownership import check_frozen_files, frozen_files, load_without_frozen

    initialise(G, plugins.registry.get("init", recipe.init.name).factory(recipe.init.options, ctx),
               bool(getattr(arch, "owns_init", False)))
    if recipe.architecture.slot.spectral_norm in ("G", "both"):
        apply_spectral_norm(G, "G", recipe)
    saved = {k: v for k, v in state.get("frozen_files", {}).items() if k.startswith("G.") or k == "G"}
    check_frozen_files(saved, {f"G.{k}" if k else "G": v for k, v in frozen_files(G).items()}, Path(path), "")
    load_without_frozen(G, state["G_ema"])  # a frozen sub-network came from its own file
    G = G.to(device).eval().requires_grad_(False)
    phase = Phase(**state["phase"])
    set_phase(G, phase.resolution, phase.alpha)
    return G, phase, recipe, arch
