"""What the maker scripts beside this file record of the official code they ran: its commit."""

from __future__ import annotations

import subprocess
from pathlib import Path


def checkout_commit(path: Path) -> str:
    """The commit checked out at ``path`` (``git rev-parse HEAD``), or a note when ``path`` is no
    git checkout (an extracted archive: the maker's ``--commit`` then names it)."""
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
