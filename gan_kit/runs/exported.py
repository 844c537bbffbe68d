"""Reading an exported model folder (``gankit export``): ``config.json`` + ``model.safetensors``.

The folder is read without pickle: the configuration is JSON and the weights are safetensors, so
a folder downloaded from anywhere cannot run code when it is loaded. G is rebuilt from the
recipe recorded in ``config.json`` (architecture, initializer parametrizations, spectral norm),
then its state dict is loaded strictly from ``model.safetensors``.
"""

from __future__ import annotations

import math

import json
from pathlib import Path
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from gan_kit.runs.checkpoint import build_generator, misfit
from gan_kit.base.version import __version__
from gan_kit.plugin_api.components import set_phase
from gan_kit.base.errors import CheckpointError, clip
from gan_kit.base.phase import Phase

__all__ = ["EXPORT_FORMAT", "EXPORT_FORMAT_VERSION", "CONFIG_FILE", "WEIGHTS_FILE", "is_export_dir",
           "read_config", "load_weights", "load_exported_generator"]

#: ``config.json``'s ``format`` marker and the version of its layout.
EXPORT_FORMAT = "gankit-export"
EXPORT_FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def is_export_dir(path: str | Path) -> bool:
    """True when ``path`` is a folder written by ``gankit export`` (a ``config.json`` with the
    export marker); a run folder or anything else is False."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("format") == EXPORT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def read_config(folder: str | Path) -> dict:
    """``config.json`` of an exported folder, checked (``CheckpointError``, one line, for a missing,
    unreadable, foreign or newer-format file)."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{folder}: no {CONFIG_FILE} (not a folder written by gankit export)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or clip(str(e))})") from None
    try:
        config = json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"{path}: not valid JSON ({clip(str(e))}); export the checkpoint again with gankit "
                              f"export") from None
    if not isinstance(config, dict) or config.get("format") != EXPORT_FORMAT:
        raise CheckpointError(f"{path}: not a gankit export (no format = {EXPORT_FORMAT!r})")
    version = config.get("format_version")
    if not isinstance(version, int) or version > EXPORT_FORMAT_VERSION:
        raise CheckpointError(f"{path}: export format {version} is newer than this gankit reads "
                              f"({EXPORT_FORMAT_VERSION}); upgrade gankit")
    for key in ("recipe", "channels", "resolution", "alpha"):
        if key not in config:
            raise CheckpointError(f"{path}: key {key!r} is missing (re-export the checkpoint)")
    return config


def load_weights(folder: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """G_ema's state dict from ``folder/model.safetensors`` (no pickle involved), on ``device``.
    Raises ``CheckpointError`` (one line) for a missing or damaged file."""
    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{folder}: no {WEIGHTS_FILE} (export with --format safetensors)")
    try:
        return load_file(str(weights), device=str(device))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights}: not a readable safetensors file ({clip(str(e))})") from None


def load_exported_generator(folder: str | Path, device: str | torch.device = "cpu"):
    """G_ema of an exported folder, rebuilt from its recipe, weights from ``model.safetensors``.

    Returns ``(G_ema, phase, recipe, architecture, config)`` like
    ``gan_kit.runs.checkpoint.load_generator`` plus the parsed ``config.json``. Raises
    ``CheckpointError`` (missing or foreign files, weights that do not fit the recipe) or
    ``RecipeError`` (the recorded recipe names a component no installed plugin registers).
    """
    folder = Path(folder)
    config = read_config(folder)
    weights = folder / WEIGHTS_FILE
    state = load_weights(folder)
    # model.safetensors holds every tensor of G, its frozen sub-networks' too: no weights file is read.
    G, recipe, arch = build_generator(config["recipe"], int(config["channels"]), int(config.get("num_classes", 0)),
                                      source=f"{folder / CONFIG_FILE}[recipe]", frozen_from_files=False)
    try:
        G.load_state_dict(state)
    except RuntimeError:
        versions = config.get("versions") if isinstance(config.get("versions"), dict) else {}
        raise CheckpointError(f"{weights}: written by gankit {versions.get('gankit') or '(version not recorded)'}; the "
                              f"weights do not fit the G its config.json describes to this gankit {__version__}: "
                              f"{misfit(G.state_dict(), state)} (export the checkpoint again)") from None
    G = G.to(device).eval().requires_grad_(False)
    saved = config.get("phase")
    if isinstance(saved, dict) and saved.get("end_nimg", 0) is None:
        saved = {**saved, "end_nimg": math.inf}  # written as null: JSON has no infinity
    phase = Phase(**saved) if isinstance(saved, dict) else None
    set_phase(G, int(config["resolution"]), float(config["alpha"]))
    return G, phase, recipe, arch, config
