"""What the maker scripts beside this file record of the official code they ran: its commit."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np


def checkout_commit(path: Path) -> str:
    """The commit checked out at ``path`` (``git rev-parse HEAD``), or a note when ``path`` is no
    git checkout (an extracted archive: the maker's ``--commit`` then names it)."""
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def put_on_path(repo: str | Path) -> None:
    """Put the official checkout ``repo`` first on sys.path, standing in for two modules its code
    imports that this environment may lack: ``pkg_resources.parse_version`` (conv2d_gradfix imports
    it at the top; packaging's is the same function) and ``psutil`` (never called on the CPU)."""
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        from packaging.version import parse

        sys.modules["pkg_resources"] = types.SimpleNamespace(parse_version=parse)
    try:
        import psutil  # noqa: F401
    except ImportError:
        sys.modules["psutil"] = types.ModuleType("psutil")
    sys.path.insert(0, str(repo))


def make_transform(translate, angle) -> np.ndarray:
    """gen_images.py's make_transform: a rotation by ``angle`` degrees and a translation, the
    matrix it inverts into G.synthesis.input.transform (float64 [3, 3])."""
    m = np.eye(3)
    s, c = np.sin(angle / 360.0 * np.pi * 2), np.cos(angle / 360.0 * np.pi * 2)
    m[0][0], m[0][1], m[0][2] = c, s, translate[0]
    m[1][0], m[1][1], m[1][2] = -s, c, translate[1]
    return m
