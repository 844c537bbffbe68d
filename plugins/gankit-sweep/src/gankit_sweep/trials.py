"""One trial of a sweep as an ordinary run: the ``gankit run`` child process that trains it, the
metrics.jsonl it writes (read as it grows), and ``sweep.json``, the trial's record in its run
directory (state, parameters, seed, objective, timings) that ``gankit compare`` reads.

A child runs in a session of its own (a Ctrl-C in the terminal reaches the sweep, which forwards
it) and, on Linux, gets SIGTERM when the sweep process dies (``PR_SET_PDEATHSIG``): it writes a
checkpoint and exits instead of training on unwatched.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gan_kit import CheckpointLayout

__all__ = ["child_command", "spawn", "MetricsTail", "read_state", "write_state", "run_finished", "last_log_line",
           "threads_per_job", "exit_status", "final_value", "no_final_value", "child_record", "wait_previous_child",
           "STATE_FILE", "LOG_FILE"]

STATE_FILE = "sweep.json"
LOG_FILE = "sweep.log"


def threads_per_job(jobs: int) -> int:
    """CPU threads for each of ``jobs`` trials at once: the cores divided between them (two runs
    sharing cores each with every thread were measured 20-40x slower than one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // jobs)


def exit_status(returncode: int) -> int:
    """A child's exit status as the shell reports it: a death by signal N (``Popen.returncode``
    -N) is 128 + N, so a trial stopped by SIGTERM reads 143 whether its handler exited with 143
    or the signal killed it."""
    return 128 - returncode if returncode < 0 else returncode


def child_command(recipe: Path, run_dir: Path, sets: list[str], *, resume: bool, overwrite: bool,
                  threads: int | None) -> list[str]:
    """The ``python -m gan_kit run`` command of a trial: fresh (the recipe with the trial's
    ``--set`` items) or resumed from the run directory's checkpoint (the recipe saved in it)."""
    cmd = [sys.executable, "-m", "gan_kit", "run"]
    if resume:
        cmd += ["--resume", str(run_dir)]
    else:
        cmd += [str(recipe), "--out", str(run_dir)]
        for s in sets:
            cmd += ["--set", s]
        if overwrite:
            cmd.append("--overwrite")
    cmd += ["--set", "run.progress=false"]
    if threads is not None:
        cmd += ["--set", f"run.threads={threads}"]
    return cmd


def _die_with_parent(parent: int):
    """A ``preexec_fn``: SIGTERM this child when the process that started it dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``); exit at once if it is already gone."""
    def preexec() -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            return  # not Linux: the sweep's own handlers stop children on Ctrl-C / SIGTERM
        if os.getppid() != parent:
            os._exit(143)

    return preexec


def spawn(cmd: list[str], run_dir: Path, threads: int | None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` with its output appended to ``run_dir/sweep.log``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            child_env[var] = str(threads)
    child_env.pop("GANKIT_DEBUG", None)
    with open(run_dir / LOG_FILE, "ab") as log:
        log.write(f"\n### {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env,
                                start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))


class MetricsTail:
    """The rows of a run's metrics.jsonl, read as they are written: ``new_rows()`` returns the
    complete lines added since the last call. A resumed run rewrites the file (dropping the rows
    after its checkpoint): then reading starts over."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.inode: int | None = None

    def new_rows(self) -> list[dict]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.inode, self.offset = st.st_ino, 0
        if st.st_size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
        self.offset += end
        rows = []
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows


def read_rows(run_dir: Path) -> list[dict]:
    return MetricsTail(run_dir / "metrics.jsonl").new_rows()


def run_finished(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` reached its end (its last metrics row is the final tick and
    its final checkpoint exists)."""
    rows = read_rows(run_dir)
    return bool(rows) and bool(rows[-1].get("Progress/final")) and CheckpointLayout(run_dir).latest.is_file()


def metric_values(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """``(tick, value)`` of every row holding a finite ``key``."""
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((int(r.get("Progress/tick", len(out))), float(v)))
    return out


def final_value(last: dict, key: str) -> float | None:
    """The objective of a finished run: ``key`` in its final metrics row when a finite number,
    else None - never an earlier row's value (a metric can be NaN, or fail, at the final tick
    only: a collapsed G, a singular covariance)."""
    v = last.get(key)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def no_final_value(last: dict, key: str) -> str:
    """Why a finished run has no objective: its final row's ``key`` is not finite, or missing."""
    kimg = last.get("Progress/kimg")
    at = f" at kimg {kimg:g}" if isinstance(kimg, (int, float)) else ""
    if key in last:
        return (f"{key} is {last[key]} in the final metrics row{at} (earlier values are not the result; "
                f"`gankit eval` on the final checkpoint measures it again)")
    return (f"the final metrics row{at} has no {key} (the metric failed at the end? see sweep.log; `gankit eval` on "
            f"the final checkpoint retries it)")


def read_state(run_dir: Path) -> dict:
    try:
        data = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def write_state(run_dir: Path, **fields: Any) -> dict:
    """Merge ``fields`` into ``run_dir/sweep.json`` (written atomically); returns the record."""
    state = {**read_state(run_dir), **fields}
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{STATE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / STATE_FILE)
    return state


def last_log_line(run_dir: Path) -> str:
    """The child's last ``error:`` line (else its last line) in sweep.log, for a failed trial."""
    try:
        lines = [ln.strip() for ln in (run_dir / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
                 if ln.strip() and not ln.startswith("### ")]
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or [""])[-1][:300]


def child_record(record: dict) -> dict:
    """The identity (``gankit_sweep.procs``) of the ``gankit run`` child a trial's ``sweep.json``
    ``record`` names."""
    return {"host": record.get("host"), "pid": record.get("child_pid"), "start": record.get("child_start"),
            "boot": record.get("child_boot")}


def wait_previous_child(record: dict, run_dir: Path, timeout: float = 120.0) -> None:
    """Wait for the ``gankit run`` child of a trial's previous attempt (its ``sweep.json``
    ``record``) to exit: a sweep killed moments ago leaves it writing its checkpoint. Only a
    process that is provably that child (pid, start time and boot recorded and matching, on this
    machine) is waited for, and killed after ``timeout`` seconds; a pid held by another process
    now is left alone. Then, whatever the record says, wait (never signal) while another run
    holds the run directory's lock (``gan_kit.runs.lock``): a child on another machine, or one an
    older gankit recorded without its start time."""
    from gan_kit import lock_problem

    from gankit_sweep import procs

    child = child_record(record)
    if child["pid"] and int(child["pid"]) != os.getpid() and not procs.wait_gone(child, timeout):
        procs.kill_if_same(child, signal.SIGKILL)
        procs.wait_gone(child, 10)
    end = time.monotonic() + timeout
    while lock_problem(run_dir) is not None and time.monotonic() < end:
        time.sleep(0.5)
