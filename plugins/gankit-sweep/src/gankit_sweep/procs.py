"""Process identity: a recorded process is the same one only when its pid, its start time and
the machine's boot both match.

A pid alone names no process for long: pids are reused after the process exits (soon, in a
container's own pid namespace or on a busy machine; always after a reboot). So wherever a sweep
records a process (a trial's ``gankit run`` child, the worker that claimed a trial) it records
``identity(pid)``: the pid, its start time (field 22 of ``/proc/<pid>/stat``, clock ticks after
boot) and the boot id (``/proc/sys/kernel/random/boot_id``). ``same(record)`` is True only when
the process holding that pid now has the same start time on the same boot; a process that cannot
be proven to be the recorded one (another machine, a record without a start time, a system
without ``/proc``) is never waited for nor signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

__all__ = ["identity", "start_time", "boot_id", "same", "wait_gone", "kill_if_same"]


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of process ``pid`` from ``/proc/<pid>/stat`` (fields 3 and 22)."""
    try:
        # The command name (field 2) may hold spaces and ')': the fields after its last ')'.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux: clock ticks after boot, as text); None when there
    is no such process or no ``/proc``."""
    stat = _stat(pid)
    return stat[1] if stat else None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def identity(pid: int | None = None) -> dict:
    """What names process ``pid`` (default: this one) for ``same``: host, pid, start time, boot."""
    pid = os.getpid() if pid is None else int(pid)
    return {"host": socket.gethostname(), "pid": pid, "start": start_time(pid), "boot": boot_id()}


def same(record: dict | None) -> bool | None:
    """Whether the process ``record`` (an ``identity``) names is still running: True when a process
    with its pid runs on this machine with the same start time (and boot); False when it is
    provably gone (no such pid, or another process holds it now); None when this machine cannot
    tell (the record is from another host, or lacks a start time)."""
    if not record or record.get("host") != socket.gethostname() or not record.get("pid"):
        return None
    pid = int(record["pid"])
    recorded_boot = record.get("boot")
    if recorded_boot and boot_id() and recorded_boot != boot_id():
        return False  # rebooted since: every process of then is gone
    stat = _stat(pid)
    if stat is not None and stat[0] in ("Z", "X"):
        return False  # exited; only its parent has not collected its status yet
    now = stat[1] if stat else None
    if now is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return None  # it exists, but without /proc nothing proves it is the recorded one
    if record.get("start") is None:
        return None
    return now == str(record["start"])


def wait_gone(record: dict, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds while the recorded process runs; True once it is provably
    gone (or was never provably it), False when it still runs at the timeout."""
    end = time.monotonic() + timeout
    while True:
        if same(record) is not True:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.2)


def kill_if_same(record: dict, signum: int = signal.SIGKILL) -> bool:
    """Send ``signum`` to the recorded process only if it is provably that process; True if sent.
    On Linux the check and the signal go through one pidfd, so a pid reused in between is not hit."""
    if same(record) is not True:
        return False
    pid = int(record["pid"])
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        if same(record) is not True:  # checked again once the pidfd pins the process
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, signum)
        else:
            os.kill(pid, signum)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
