"""The default number of torch CPU threads: the cores actually free when a run starts.

torch's default is one intra-op thread per core. On a shared machine that collapses: OpenMP
threads spin at each parallel region's barrier waiting for a sibling that another job has
descheduled, so a 2-thread run beside one busy job ran at 10-19 img/s against 400 with one thread
(docs/performance.md, "CPU threads"). gankit therefore starts with as many threads as cores are
idle: it samples the idle time of the CPUs this process may run on (its affinity, capped by a
cgroup CPU quota) over a quarter second from ``/proc/stat``. ``run.threads`` set in the recipe,
or ``OMP_NUM_THREADS`` in the environment (torchrun sets it to 1 for ``--nproc`` > 1), wins.
With ``OMP_WAIT_POLICY=PASSIVE`` exported before the run (OpenMP reads it when torch loads, so
gankit cannot set it itself) waiting threads sleep instead of spinning, and every usable core
is used.

The choice follows the machine while the run trains (``ThreadFollower``): at every tick the
count is chosen again from the cores other processes left free since the previous tick - the
idle time of the usable CPUs plus what this process itself used (its own threads are busy
training, and those cores are its to keep) - so a job that starts later on the same cores
lowers the count, and one that ends raises it again, never above the usable CPUs.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["choose_threads", "usable_cpus", "idle_cores", "default_threads", "set_threads", "ThreadFollower",
           "follows_machine"]

#: Seconds over which the CPUs' idle time is sampled.
SAMPLE_S = 0.25


def choose_threads(cpus: int, idle: float | None) -> int:
    """Threads for a process that may use ``cpus`` cores of which ``idle`` (a sum of idle
    fractions, e.g. 1.3 = one core and a third) are free: ``floor(idle + 0.25)``, between 1 and
    ``cpus``; ``cpus`` when ``idle`` is unknown (torch's own default). A core that is 80% free
    counts as free; one that is only half free does not, since a thread that waits for a core
    at every barrier costs more than it brings."""
    cpus = max(1, int(cpus))
    if idle is None or not math.isfinite(idle):
        return cpus
    return max(1, min(cpus, math.floor(idle + 0.25)))


def usable_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> list[int]:
    """The CPUs this process may run on (``sched_getaffinity``; every CPU where it is missing),
    as many as a cgroup v2 CPU quota (``cpu_max``: ``"<quota> <period>"`` or ``"max ..."``) allows."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = cpus[:max(1, math.ceil(int(quota) / int(period)))]
    except (OSError, ValueError):
        pass
    return cpus


def _cpu_times(cpus: list[int], stat: Path = Path("/proc/stat")) -> dict[int, tuple[int, int]] | None:
    """``{cpu: (idle jiffies, total jiffies)}`` from ``/proc/stat``, or None off Linux."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    out = {}
    wanted = set(cpus)
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        cpu = int(name[3:])
        if cpu in wanted:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            out[cpu] = (values[3] + values[4], sum(values))
    return out or None


def idle_cores(cpus: list[int], interval: float = SAMPLE_S, stat: Path = Path("/proc/stat")) -> float | None:
    """The sum over ``cpus`` of their idle fraction (idle + iowait jiffies over all jiffies)
    during ``interval`` seconds, or None where ``stat`` (``/proc/stat``) cannot tell."""
    before = _cpu_times(cpus, stat)
    if before is None:
        return None
    time.sleep(interval)
    after = _cpu_times(cpus, stat)
    if after is None:
        return None
    idle = 0.0
    for cpu, (i0, t0) in before.items():
        i1, t1 = after.get(cpu, (i0, t0))
        if t1 > t0:
            idle += (i1 - i0) / (t1 - t0)
    return idle


def default_threads() -> int | None:
    """The thread count for a run whose recipe leaves ``run.threads`` unset: None (leave torch
    alone) when ``OMP_NUM_THREADS`` is set, else ``choose_threads`` of the usable CPUs and their
    idle time now."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    cpus = usable_cpus()
    if os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE":
        # Threads that sleep at a barrier instead of spinning do not collapse beside other jobs
        # (docs/performance.md): every usable core.
        return len(cpus)
    return choose_threads(len(cpus), idle_cores(cpus))


def follows_machine(requested: int | None, device: Any) -> bool:
    """Whether a run's thread count is gankit's to choose, at the start and at every tick: a CPU
    run with ``run.threads`` unset, no ``OMP_NUM_THREADS`` and no passive OpenMP wait policy."""
    return (requested is None and getattr(device, "type", device) == "cpu" and not os.environ.get("OMP_NUM_THREADS")
            and os.environ.get("OMP_WAIT_POLICY", "").strip().upper() != "PASSIVE")


class ThreadFollower:
    """Chooses torch's intra-op thread count again at each tick of a CPU run.

    ``free_cores()``: over the time since the previous reading, the cores other processes left
    free - the summed idle fraction of the usable ``cpus`` (``/proc/stat``) plus this process's
    CPU seconds per second (``own_cpu_seconds``, default ``time.process_time``: all its threads;
    data-loader workers are other processes and count as load). ``update(free)`` sets
    ``torch.set_num_threads(choose_threads(len(cpus), free))`` and returns the new count when it
    changed (None otherwise, or when ``free`` is unknown). The readings cost two file reads per
    tick, no sampling sleep.
    """

    def __init__(self, cpus: list[int], stat: Path = Path("/proc/stat"), own_cpu_seconds=time.process_time,
                 clock=time.monotonic):
        self.cpus, self.stat, self.own, self.clock = list(cpus), stat, own_cpu_seconds, clock
        self._last = self._reading()

    def _reading(self):
        return _cpu_times(self.cpus, self.stat), self.own(), self.clock()

    def free_cores(self) -> float | None:
        """Cores not used by other processes since the previous call (or the construction); None
        where ``/proc/stat`` cannot tell or no time passed."""
        (before, own0, t0), now = self._last, self._reading()
        self._last = now
        after, own1, t1 = now
        if before is None or after is None or t1 <= t0:
            return None
        idle = 0.0
        for cpu, (i0, j0) in before.items():
            i1, j1 = after.get(cpu, (i0, j0))
            if j1 > j0:
                idle += (i1 - i0) / (j1 - j0)
        return idle + max(0.0, own1 - own0) / (t1 - t0)

    def update(self, free: float | None = None) -> int | None:
        """Re-choose the thread count for ``free`` cores (default: ``free_cores()``); returns the
        new count if it changed, else None."""
        import torch

        if free is None:
            free = self.free_cores()
        if free is None:
            return None
        threads = choose_threads(len(self.cpus), free)
        if threads == torch.get_num_threads():
            return None
        torch.set_num_threads(threads)
        return threads


def set_threads(requested: int | None, device: Any) -> None:
    """``torch.set_num_threads`` for a run: ``requested`` (``run.threads``, at most the machine's
    cores: more only adds contention, and torch's pool is process-wide), else for a CPU run
    ``default_threads()``; a GPU run without ``run.threads`` keeps torch's default."""
    import torch

    if requested is not None:
        torch.set_num_threads(min(requested, os.cpu_count() or 1))
    elif getattr(device, "type", device) == "cpu":
        threads = default_threads()
        if threads is not None:
            torch.set_num_threads(threads)
