"""Files that appear whole or not at all: every gankit output (checkpoints, images, videos,
export folders, reports) is written under a temporary name in its own folder and renamed to its
name once complete (``os.replace``, atomic on POSIX), so a reader, a crash, Ctrl-C or a full
disk leaves the previous file or no file - never a truncated one under the final name.

``write_atomic`` writes one file from a callback given the open file; ``StagedFiles`` stages
several (a library that wants a path, a folder of outputs) and renames them together only when
all are written, so a folder never mixes two runs' files of the same names.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Callable

__all__ = ["write_atomic", "temporary_sibling", "replace_with", "StagedFiles"]


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(tmp: Path, path: Path) -> None:
    """Flush ``tmp`` to disk, give it the ordinary permissions (mkstemp makes files private;
    outputs are ordinary files, the umask decides) and rename it over ``path``."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)


def temporary_sibling(path: str | Path) -> Path:
    """An empty new file beside ``path`` (same folder, so a rename is atomic), named
    ``.<name>.<random>.tmp<suffix>``: hidden, and ending in ``path``'s suffix, so a writer that
    picks its format from the name (Pillow, ffmpeg) writes the right one. The folder is made when
    missing. Raises ``OSError`` when the folder cannot be made or written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def replace_with(tmp: str | Path, path: str | Path) -> Path:
    """Rename the finished temporary file ``tmp`` (from ``temporary_sibling(path)``) over
    ``path``: flushed to disk first, ordinary permissions, the folder synced. Returns ``path``."""
    path = Path(path)
    _publish(Path(tmp), path)
    _fsync_dir(path.parent)
    return path


def write_atomic(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Write a file at ``path`` atomically: ``write(f)`` fills a temporary file in the same
    folder, which is flushed to disk and renamed over ``path`` (a reader sees the old file or the
    new one, never half of it; a crash leaves no partial file). Returns the path. For a file
    saved beside a checkpoint (``<name>.json`` next to ``<name>.pt``), e.g.
    ``write_atomic(p, lambda f: f.write(json.dumps(d).encode()))``."""
    path = Path(path)
    tmp = temporary_sibling(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
        _publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


class StagedFiles:
    """Several output files written under temporary names and renamed together::

        with StagedFiles() as staged:
            image.save(staged.path(outdir / "proj.png"))      # a temporary name beside it
            np.savez(staged.path(outdir / "projected_w.npz"), w=w)
        # here (no exception): both renamed to their names; on an exception: both removed

    ``path(final)`` returns the temporary file to write ``final`` into (``temporary_sibling``);
    ``commit()`` (called on leaving the block without an exception) renames every staged file to
    its final name, in staging order, and returns the final names; ``discard()`` (on an
    exception, Ctrl-C included) removes them, so the previous files stay as they were. Writing
    every file first and renaming them last keeps the window in which a folder holds some new and
    some old files to the renames alone (no drawing or encoding happens in it)."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []
        self._names: dict[str, Path] = {}

    def path(self, final: str | Path) -> Path:
        tmp = temporary_sibling(final)
        self._staged.append((tmp, Path(final)))
        self._names[str(tmp)] = Path(final)
        return tmp

    def drop(self, tmp: str | Path) -> None:
        """Remove a staged temporary file that was not written after all (a plot with nothing
        to show): its final name is left as it is."""
        self._staged = [(t, f) for t, f in self._staged if t != Path(tmp)]
        Path(tmp).unlink(missing_ok=True)

    def final_name(self, name: str | Path) -> Path:
        """The final name of a staged temporary file (a library's error names the file it was
        writing: say which output that was); any other name as it is."""
        return self._names.get(str(name), Path(name))

    def commit(self) -> list[Path]:
        try:
            for tmp, final in self._staged:
                _publish(tmp, final)
        except BaseException:
            self.discard()
            raise
        for folder in dict.fromkeys(final.parent for _, final in self._staged):
            _fsync_dir(folder)
        done = [final for _, final in self._staged]
        self._staged = []
        return done

    def discard(self) -> None:
        for tmp, _ in self._staged:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # the folder went away or turned read-only: nothing of ours to leave there
        self._staged = []

    def __enter__(self) -> "StagedFiles":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()
