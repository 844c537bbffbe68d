"""``gankit import``: a model file of another codebase (NVIDIA's network-snapshot pickles, R3GAN's,
anything a plugin's importer reads) written as a gankit model folder.

The folder has the layout of a run directory, so every command reads it as one::

    DIR/checkpoints/latest.pt   the networks in gankit's layout (G, D, G_ema, ADA's p) and the
                                record of where they came from (format, file name, SHA-256,
                                licence, seed rule)
    DIR/recipe.toml             a recipe that builds these networks; point data.path at your
                                images and ``gankit run DIR/recipe.toml --init-from DIR``

Nothing the file holds is run (``gan_kit.read_pickle``). The destination is checked before the
file is read, and both files are written under temporary names and renamed when complete.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from gan_kit.base.errors import CheckpointError, GankitError
from gan_kit.plugin_api.foreign import import_file
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.hub import resolve_source
from gan_kit.runs.layout import CheckpointLayout
from gan_kit.tools.outputs import check_folder

__all__ = ["import_model", "check_destination", "describe"]


def check_destination(out: Path) -> None:
    """Refuse (``GankitError``, one line) an ``out`` that is a file, that holds anything but an
    earlier import (a training run's files, other files), or that cannot be written. Called
    before the source is read; it leaves no folder behind (the writes make them)."""
    if out.exists() and not out.is_dir():
        raise GankitError(f"--out {out}: a file, not a folder; name a new folder for the imported model")
    if out.is_dir():
        entries = {p.name for p in out.iterdir()}
        latest = CheckpointLayout(out).latest
        others = [p for p in (out / "checkpoints").glob("*") if p != latest] if (out / "checkpoints").is_dir() else []
        ours = entries <= {"checkpoints", "recipe.toml"} and not others and (not latest.exists() or _is_import(latest))
        if not ours:
            raise GankitError(f"--out {out}: the folder holds other files ({', '.join(sorted(entries)[:4])}); gankit "
                              f"import writes a new folder (or replaces an earlier import): name an empty or new one")
    check_folder(out / "checkpoints", "--out")  # the folders it makes to prove it are removed again


def _is_import(latest: Path) -> bool:
    if not latest.is_file():
        return False
    try:
        return bool(ckpt.load(latest).get("imported"))
    except CheckpointError:
        return False


def import_model(source: str | Path, out: str | Path) -> tuple[dict, str]:
    """Read ``source`` (a path or ``hf://OWNER/REPO/FILE``) with the installed importers and write
    the model folder ``out``. Returns ``(checkpoint dict, importer name)``.

    The converted G_ema is built from the recipe and loaded strictly before anything is written,
    so a conversion that does not fit is refused, not saved. Raises ``GankitError`` (the
    destination), ``CheckpointError`` (an unreadable file, one no importer recognises, a
    refused pickle: ``UnsafePickleError``) or an importer's ``GankitError`` (a configuration
    gankit cannot build), each one line.
    """
    out = Path(out)
    path = resolve_source(source)
    if path.is_dir():
        raise CheckpointError(f"{source}: a folder; gankit import reads a model file of another codebase (a "
                              f"network-snapshot .pkl); a run directory or an export folder is read by every command "
                              f"as it is")
    if not path.is_file():
        raise CheckpointError(f"{source}: no such file (name a network-snapshot .pkl or another model file)")
    if not ckpt.is_foreign(path):
        raise CheckpointError(f"{source}: not another codebase's model file (a network-snapshot pickle, a StudioGAN "
                              f"model=G-*.pth); a gankit checkpoint is read by every command as it is, no import needed")
    check_destination(out)
    state, name = import_file(path, build_plugins().registry)
    try:
        ckpt.load_generator(path, state=state)
    except (RuntimeError, KeyError, ValueError) as e:
        first = " ".join(str(e).split()) or type(e).__name__
        raise CheckpointError(f"{source}: importer {name!r} made networks that do not fit its own recipe ({first}); "
                              f"please report this with the file's format") from None
    body = {k: v for k, v in state.items() if k not in ("magic", "format_version")}
    ckpt.save_atomic(body, CheckpointLayout(out).latest)
    ckpt.write_atomic(out / "recipe.toml", lambda f: f.write(state["recipe"].encode("utf-8")))
    return state, name


def describe(state: dict) -> str:
    """One line on an imported model: format, resolution, channels, classes, z size."""
    arch = tomllib.loads(state["recipe"]).get("architecture", {})
    classes = f", {state['num_classes']} classes" if state.get("num_classes") else ""
    z = arch.get("latent_dim")
    return (f"{arch.get('name', '?')} from {state['imported']['format']}, {state['phase']['resolution']} px, "
            f"{state['channels']} channel{'s' if state['channels'] != 1 else ''}{classes}" + (f", z {z}" if z else ""))
