"""Checkpoints: one file per save, written atomically, loaded with ``weights_only=True``.

A save writes to a temporary file in the same folder, flushes and fsyncs it, renames it over
the target (atomic on POSIX) and fsyncs the folder, so a crash or SIGKILL mid-write leaves the
previous checkpoint intact (``write_atomic``, from ``gan_kit.base.atomic``, the one owner of
atomic writing, is re-exported here).
"""

from __future__ import annotations

import pickle
import random
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gan_kit.base.atomic import write_atomic
from gan_kit.base.errors import CheckpointError, clip

#: Bumped whenever the layout of the saved dict changes incompatibly.
FORMAT_VERSION = 1
MAGIC = "gankit-checkpoint"

__all__ = ["FORMAT_VERSION", "MAGIC", "write_atomic", "save_atomic", "load", "rng_state", "set_rng_state",
           "build_generator", "check_generator_files", "GENERATOR_KEYS", "written_by", "misfit", "load_generator"]


def save_atomic(state: dict, path: str | Path) -> Path:
    """Write ``state`` (with the format marker added) to ``path`` atomically (``write_atomic``);
    return the path."""
    state = {"magic": MAGIC, "format_version": FORMAT_VERSION, **state}
    return write_atomic(path, lambda f: torch.save(state, f))


def load(path: str | Path, map_location: Any = "cpu") -> dict:
    """Load a gankit checkpoint safely (``weights_only=True``).

    A model file of another codebase (a pickle: NVIDIA's network snapshots, R3GAN's) is read by
    the registered importers (``gan_kit.plugin_api.foreign.import_file``) into the same dict,
    with an ``imported`` entry saying what it came from; nothing in it is run.

    Raises ``CheckpointError`` with one line for a missing, truncated, foreign or newer-format
    file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found (list the run's checkpoints/ folder)")
    if is_foreign(path):
        from gan_kit.plugin_api.foreign import import_file
        from gan_kit.plugin_api.manager import build_plugins

        state, _ = import_file(path, build_plugins().registry)
        return _mapped(state, map_location)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError, OSError,
            KeyError, IndexError, TypeError, AttributeError, UnicodeDecodeError) as e:
        # torch's weights_only unpickler reads a file that is no pickle (a text file named .pt) byte
        # by byte as opcodes, and fails with whatever the bytes lead to (a KeyError on its memo, an
        # IndexError on its stack): every such failure means the file is not a checkpoint
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, (KeyError, IndexError, TypeError, AttributeError, UnicodeDecodeError)):
            first = "its bytes are not a torch.save file"  # the unpickler's own words ('101') say nothing
        elif first.startswith("Weights only load failed"):
            first = "it holds objects a safe (weights_only) load refuses"
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or foreign file: {clip(first)})") from None
    if not isinstance(state, dict) or state.get("magic") != MAGIC:
        raise CheckpointError(f"{path}: not a gankit checkpoint (no '{MAGIC}' marker)")
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format {version} is newer than this gankit reads ({FORMAT_VERSION}); upgrade gankit")
    return state


def is_foreign(path: str | Path) -> bool:
    """True when ``path`` is a file that is not a gankit checkpoint but another codebase's model
    file: a plain pickle (NVIDIA's network snapshots, R3GAN's), or a ``torch.save`` zip archive
    whose pickle does not start with gankit's marker (StudioGAN's ``model=G-*.pth``). A zip that
    cannot be opened (a truncated checkpoint) is not foreign: ``load`` says what is wrong."""
    from gan_kit.plugin_api.pickles import is_pickle

    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    if is_pickle(head):
        return True
    if head[:4] != b"PK\x03\x04":
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")), None)
            if name is None:
                return False
            with archive.open(name) as f:
                start = f.read(512)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return False
    # save_atomic writes the marker as the dict's first entry, so it is in the pickle's first bytes
    return MAGIC.encode() not in start


def _mapped(state: dict, map_location: Any) -> dict:
    """An imported checkpoint's networks moved to ``map_location`` (they are read to the CPU)."""
    if map_location in (None, "cpu") or callable(map_location) or isinstance(map_location, dict):
        return state
    for key in ("G", "D", "G_ema"):
        if state.get(key) is not None:
            state[key] = {k: v.to(map_location) for k, v in state[key].items()}
    return state


def rng_state(device: torch.device | str | None = None, world_size: int = 1) -> dict:
    """Every RNG state (torch CPU, numpy, python and, on CUDA, the generator of this process's own
    ``device``), weights_only-safe.

    Under several processes every rank calls this (a collective): ``"cuda_ranks"`` holds each
    rank's own CUDA generator state, in rank order, so each restores its own (all ranks share one
    seed, but a rank's generator is the one of *its* GPU, not rank 0's ``get_rng_state_all()``).
    """
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": _py_state(random.getstate()),
    }
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        own = torch.cuda.get_rng_state(device)
        if world_size > 1:
            import torch.distributed as dist

            gathered: list = [None] * world_size
            dist.all_gather_object(gathered, own)  # CPU ByteTensors, whatever the backend
            state["cuda_ranks"] = gathered
        else:
            state["cuda_ranks"] = [own]
    return state


def _py_state(s):
    return [s[0], list(s[1]), s[2]]


def _host(t: Any) -> torch.Tensor:
    """An RNG state as the CPU ``ByteTensor`` / int64 tensor the setters need, wherever
    ``torch.load``'s ``map_location`` put it (a CUDA run loads its checkpoint to the GPU)."""
    t = torch.as_tensor(t)
    if t.device.type == "meta":
        raise CheckpointError("the checkpoint's RNG state was loaded to the 'meta' device, which holds no data; "
                              "load it with map_location='cpu'")
    return t.cpu()


def set_rng_state(state: dict, device: torch.device | str | None = None, rank: int = 0) -> None:
    """Restore what ``rng_state`` saved. The CPU / numpy / python states go back on the host
    whatever device the checkpoint was mapped to; on CUDA this process's ``device`` gets rank
    ``rank``'s saved generator (rank 0's when the checkpoint was written by fewer processes: all
    ranks draw the same global numbers, ``gan_kit.base.randomness``)."""
    torch.set_rng_state(_host(state["torch"]).to(torch.uint8))
    n = state["numpy"]
    np.random.set_state(("MT19937", _host(n["keys"]).numpy().astype(np.uint32), int(n["pos"]), int(n["has_gauss"]),
                         float(n["cached_gaussian"])))
    p = state["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda":
        return
    ranks = state.get("cuda_ranks")
    if ranks:
        torch.cuda.set_rng_state(_host(ranks[rank] if rank < len(ranks) else ranks[0]).to(torch.uint8), device)
    elif "cuda" in state and len(state["cuda"]) == torch.cuda.device_count():
        # checkpoints before "cuda_ranks": rank 0's get_rng_state_all()
        torch.cuda.set_rng_state_all([_host(t).to(torch.uint8) for t in state["cuda"]])


def build_generator(recipe_text: str, channels: int, num_classes: int = 0, *, source: str = "checkpoint[recipe]",
                    frozen_from_files: bool = True):
    """A fresh G as the recipe ``recipe_text`` builds it (architecture, initializer
    parametrizations, spectral norm where the recipe puts it), weights not loaded yet.

    The architecture builds D too, but D's frozen sub-networks (``gan_kit.load_frozen``) are
    not read: their files need not exist to draw from G. G's are read from their files, unless
    ``frozen_from_files`` is False (an exported folder's weights hold them).

    Returns ``(G, recipe, architecture)``. ``source`` names the recipe's origin in errors.
    Raises ``RecipeError`` when the recipe names a component no installed plugin registers, and
    ``GankitError`` when a file of G's frozen sub-networks is missing.
    """
    from gan_kit.plugin_api.components import BuildContext
    from gan_kit.plugin_api.ownership import frozen_loads_deferred, load_deferred
    from gan_kit.recipe import load_recipe

    recipe, plugins = load_recipe(Path(source), text=recipe_text)
    ctx = BuildContext(resolution=recipe.resolution, channels=channels, recipe=recipe, num_classes=num_classes)
    arch = plugins.registry.get("architecture", recipe.architecture.name).factory(recipe.architecture.options, ctx)
    with frozen_loads_deferred():
        G, _ = arch.build(recipe.resolution, channels)
    if frozen_from_files:
        load_deferred(G)
    from gan_kit.training.networks import apply_spectral_norm, initialise

    # As the run built it: an architecture that owns its init keeps it, frozen parts are left alone.
    initialise(G, plugins.registry.get("init", recipe.init.name).factory(recipe.init.options, ctx),
               bool(getattr(arch, "owns_init", False)))
    if recipe.architecture.slot.spectral_norm in ("G", "both"):
        apply_spectral_norm(G, "G", recipe)
    return G, recipe, arch


def check_generator_files(state: dict, G: torch.nn.Module, path: str | Path) -> None:
    """Refuse (``CheckpointError``, one line) a G whose frozen sub-networks' files are not the
    ones the checkpoint ``state`` (read from ``path``) was trained with; D's are not checked,
    since drawing from G does not read them."""
    from gan_kit.plugin_api.ownership import check_frozen_files, frozen_files

    saved = {k: v for k, v in state.get("frozen_files", {}).items() if k.startswith("G.") or k == "G"}
    check_frozen_files(saved, {f"G.{k}" if k else "G": v for k, v in frozen_files(G).items()}, Path(path), "")


#: What ``load_generator`` reads from a checkpoint.
GENERATOR_KEYS = ("recipe", "channels", "phase", "G_ema")


def written_by(state: dict) -> str:
    """``"written by gankit 0.9.0 (checkpoint format 1)"``: who wrote a loaded checkpoint, for
    errors about a checkpoint that does not fit."""
    version = state.get("gankit_version") if isinstance(state, dict) else None
    fmt = state.get("format_version") if isinstance(state, dict) else None
    return f"written by gankit {version or '(version not recorded)'} (checkpoint format {fmt})"


def misfit(own: dict, saved: Any, skip: list[str] | tuple[str, ...] = ()) -> str:
    """What differs between the state dict a network has (``own``) and a saved one: weights
    missing from ``saved`` (keys under a prefix of ``skip`` aside: frozen sub-networks loaded from
    their own files), weights the network has not (renamed or another layout), weights of
    another shape - counts and the first names, in one line."""
    if not isinstance(saved, dict):
        return f"the saved weights are a {type(saved).__name__}, not a state dict"

    def names(keys: list[str]) -> str:
        return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

    def skipped(key: str) -> bool:
        return any(key == p or key.startswith(p + ".") for p in skip if p)

    missing = [k for k in own if k not in saved and not skipped(k)]
    extra = [k for k in saved if k not in own]
    shapes = [k for k in own if k in saved and hasattr(saved[k], "shape") and hasattr(own[k], "shape")
              and tuple(saved[k].shape) != tuple(own[k].shape)]
    parts = []
    if missing:
        parts.append(f"{len(missing)} weight{'s' if len(missing) != 1 else ''} missing ({names(missing)})")
    if extra:
        parts.append(f"{len(extra)} it has no place for ({names(extra)})")
    if shapes:
        k = shapes[0]
        parts.append(f"{len(shapes)} of another shape ({k}: {list(saved[k].shape)} saved, {list(own[k].shape)} built"
                     f"{', ...' if len(shapes) > 1 else ''})")
    return "; ".join(parts) or "the weights' values do not load"


def load_generator(path: str | Path, device: str | torch.device = "cpu", state: dict | None = None):
    """G_ema of a checkpoint, rebuilt from the recipe saved in it and set to the saved phase.

    Returns ``(G_ema, phase, recipe, architecture)`` (the built ``Architecture`` component:
    ``latent_dim``, ``supports_truncation``; ``architecture.context.num_classes`` > 0 for a
    class-conditional G, which takes ``G(z, labels)``). ``state``: the checkpoint already loaded
    from ``path`` (read once by a caller that needs more of it). Raises ``CheckpointError`` /
    ``RecipeError``.
    """
    from gan_kit.base.phase import Phase
    from gan_kit.base.version import __version__
    from gan_kit.plugin_api.ownership import frozen_files, load_without_frozen
    from gan_kit.plugin_api.components import set_phase

    if state is None:
        state = load(path, map_location=device)
    with warnings.catch_warnings(record=True) as caught:  # shown only for a checkpoint that opens
        written = written_by(state)
        missing = [key for key in GENERATOR_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"{path}: {written} has no {', '.join(repr(k) for k in missing)} (another layout: this "
                                  f"gankit {__version__} reads {', '.join(repr(k) for k in GENERATOR_KEYS)}); open it "
                                  f"with the gankit that wrote it")
        G, recipe, arch = build_generator(state["recipe"], int(state["channels"]), int(state.get("num_classes", 0)),
                                          source=f"{path}[recipe]")
        check_generator_files(state, G, path)
        try:
            load_without_frozen(G, state["G_ema"])  # a frozen sub-network came from its own file
        except (RuntimeError, KeyError, TypeError, AttributeError):
            frozen = list(frozen_files(G))
            raise CheckpointError(f"{path}: {written}; its G_ema does not fit the G that this gankit {__version__} "
                                  f"builds from its recipe: {misfit(G.state_dict(), state['G_ema'], frozen)} (open it "
                                  f"with the gankit that wrote it)") from None
        try:
            phase = Phase(**state["phase"])
        except (TypeError, ValueError):
            raise CheckpointError(f"{path}: {written}; its phase {clip(repr(state['phase']), 120)} is not the phase "
                                  f"this gankit {__version__} reads (open it with the gankit that wrote it)") from None
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    G = G.to(device).eval().requires_grad_(False)
    set_phase(G, phase.resolution, phase.alpha)
    return G, phase, recipe, arch
