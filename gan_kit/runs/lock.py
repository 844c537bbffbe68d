"""The run directory's lock: one run writes a run directory at a time.

A run (under ``--nproc N``, its rank 0 only) holds ``fcntl.flock`` on ``<out_dir>/.gankit.lock``
while it trains; the file names the holder (pid, host, start time, command). A second run -
``--overwrite`` and ``--resume`` included - is refused in one line naming that process. The
kernel drops a flock when its process dies, even by SIGKILL, so a lock left by a killed run
never blocks: the next run takes it over and says whose it was. A run that ends normally
removes the file. On systems without ``fcntl`` (Windows) runs are not locked.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

__all__ = ["LOCK_NAME", "RunLock", "lock_run_dir", "lock_problem"]

LOCK_NAME = ".gankit.lock"


class RunLock:
    """A held run-directory lock. ``stale``: what the lock file said when it was taken over from
    a run that died holding it (else ""). ``release()`` is idempotent."""

    def __init__(self, fd: int | None, path: Path, stale: str = ""):
        self.fd, self.path, self.stale = fd, path, stale

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            # Unlinked while still held: a run waiting to open it then sees a new file (see
            # lock_run_dir's inode check), never this one.
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)
            self.fd = None


def _holder_text(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", "replace").strip()


def _refusal(out_dir: Path, holder: str) -> str:
    pid = holder.split()[1] if holder.startswith("pid ") else ""
    stop = f"stop it (kill {pid}) " if pid else "stop it "
    return (f"{out_dir}: another gankit run is writing this run directory ({holder or 'holder unknown'}); wait for "
            f"it to end or {stop}before starting, resuming or overwriting a run there, or pick another folder with --out")


def lock_run_dir(out_dir: str | Path) -> tuple[RunLock | None, str | None]:
    """``(lock, None)`` once this process holds ``out_dir``'s lock (the folder is created), or
    ``(None, problem)``: the one-line refusal naming the process that holds it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_NAME
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks here
        return RunLock(None, path), None
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder_text(fd)
            os.close(fd)
            return None, _refusal(out_dir, holder)
        try:
            now = os.stat(path)
            same = (now.st_ino, now.st_dev) == (os.fstat(fd).st_ino, os.fstat(fd).st_dev)
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder finished and removed the file between our open and lock: retry
    stale = _holder_text(fd)  # a file still holding text: its run died without releasing it
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    command = " ".join(["gankit", *sys.argv[1:]])[:300]
    os.write(fd, (f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                  f"{command}\n").encode())
    os.fsync(fd)
    return RunLock(fd, path, stale), None


def lock_problem(out_dir: str | Path) -> str | None:
    """The refusal ``lock_run_dir`` would give now (the lock is taken and released at once), or
    None; a folder that does not exist is free."""
    if not (Path(out_dir) / LOCK_NAME).exists():
        return None
    lock, problem = lock_run_dir(out_dir)
    if lock is not None:
        lock.release()
    return problem
