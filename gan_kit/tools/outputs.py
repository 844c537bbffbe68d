"""Where a command writes its outputs: checked before the long work, written whole.

Every command that writes (sample, generate, style-mix, project, export, report) first proves it
can write there - ``check_folder`` / ``check_file`` make the folder when missing and create and
remove a temporary file in it, so a read-only disk, a file where a folder should be or a
folder under ``/proc`` fails in one line before any drawing - then writes through
``staged_outputs``: every file under a temporary name beside its own (``gan_kit.base.atomic``),
all renamed to their names only once every one is written. An interruption or failure leaves
the previous files (or none), never a truncated file or a folder mixing two runs' outputs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from gan_kit.base.atomic import StagedFiles, temporary_sibling
from gan_kit.base.errors import GankitError, clip

__all__ = ["check_folder", "check_file", "staged_outputs", "write_error"]

_FIX = "name a folder you can write to"


def write_error(option: str, path: str | Path, e: OSError, staged: StagedFiles | None = None) -> str:
    """One line for an ``OSError`` met writing ``path`` (``option`` names the command-line
    option): the path (a staged temporary file is called by its final name), the system's reason
    and a fix; no library text."""
    where = Path(e.filename) if e.filename is not None else Path(path)
    if staged is not None:
        where = staged.final_name(where)
    if where.name.startswith(".") and ".tmp" in where.name:  # a temporary name means nothing to the user
        where = Path(path)
    reason = e.strerror or clip(str(e)) or type(e).__name__
    return f"{option}: cannot write {where} ({reason}); {_FIX}"


def check_folder(folder: str | Path, option: str) -> Path:
    """Prove a file can be created in ``folder``: the folder (and its parents) made when
    missing, one temporary file created in it, then the file and the folders made removed again
    (the writer makes them when it writes). Returns it. Raises ``GankitError`` (one line naming
    ``option``, the folder and the reason) for a path that is a file, or a folder that cannot be
    made or written."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise GankitError(f"{option}: {folder} is a file, not a folder; {_FIX}")
    made = []  # the folders this check makes, removed again: a later refusal leaves no empty folder behind
    for parent in [folder, *folder.parents]:
        if parent.exists():
            break
        made.append(parent)
    try:
        temporary_sibling(folder / "write-check").unlink()
        for parent in made:
            parent.rmdir()
    except OSError as e:
        inside = e.filename is None or Path(e.filename).name.startswith(".write-check")
        reason = e.strerror or clip(str(e)) or type(e).__name__
        where = folder if inside else Path(e.filename)
        raise GankitError(f"{option}: cannot {'create files in' if inside else 'make the folder'} {where} ({reason}); "
                          f"{_FIX}") from None
    return folder


def check_file(path: str | Path, option: str) -> Path:
    """Prove the file ``path`` can be written (its folder made when missing; ``check_folder``)
    before the work that makes it. Returns it. Raises ``GankitError`` (one line) for a folder
    at ``path`` or a folder that cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise GankitError(f"{option}: {path} is a folder; name a file")
    check_folder(path.parent, option)
    return path


@contextlib.contextmanager
def staged_outputs(option: str) -> Iterator[StagedFiles]:
    """``StagedFiles`` whose ``OSError`` (a disk that filled up, a folder removed meanwhile)
    becomes one ``GankitError`` line naming ``option`` and the output's final name::

        with staged_outputs("--outdir") as staged:
            save_image(image, staged.path(outdir / "seed0000.png"))
    """
    staged = StagedFiles()
    try:
        with staged:
            yield staged
    except OSError as e:
        raise GankitError(write_error(option, e.filename or "", e, staged)) from None
