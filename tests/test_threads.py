"""The default CPU thread count comes from the cores free when a run starts: a 2-thread
run beside another job collapsed to 10-19 img/s against 400 with one thread."""

from __future__ import annotations

import threading

import pytest
import torch

from gan_kit.base import threads as T


@pytest.mark.parametrize("cpus, idle, expected", [
    (2, 2.0, 2),     # a quiet 2-core machine: both cores
    (2, 1.0, 1),     # one core busy with another job: one thread
    (2, 1.8, 2),     # a core 80% free counts
    (2, 1.5, 1),     # half free does not
    (2, 0.0, 1),     # everything busy: still one
    (8, 5.9, 6),
    (4, 7.0, 4),     # never above the usable cores
    (4, None, 4),    # unknown (no /proc/stat): torch's own default, one per core
])
def test_threads_follow_the_free_cores(cpus, idle, expected):
    assert T.choose_threads(cpus, idle) == expected


def test_usable_cpus_follow_affinity_and_the_cgroup_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(T.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    quota = tmp_path / "cpu.max"
    quota.write_text("max 100000\n")
    assert T.usable_cpus(quota) == [0, 1, 2, 3, 4, 5]
    quota.write_text("150000 100000\n")  # 1.5 CPUs of quota: 2 threads can run
    assert T.usable_cpus(quota) == [0, 1]
    assert T.usable_cpus(tmp_path / "missing") == [0, 1, 2, 3, 4, 5]


def test_idle_cores_reads_the_cpus_idle_time(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal
    samples = iter(["cpu 0 0 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\n",
                    "cpu 0 0 0 0 0 0 0 0\ncpu0 200 0 0 100 0 0 0 0\ncpu1 125 0 0 170 5 0 0 0\n"])
    stat.write_text(next(samples))
    timer = threading.Timer(0.05, lambda: stat.write_text(next(samples)))
    timer.start()
    idle = T.idle_cores([0, 1], interval=0.3, stat=stat)
    timer.join()
    assert idle == pytest.approx(0.0 + 0.75)  # cpu0 fully busy, cpu1 75/100 idle or iowait
    assert T.idle_cores([0], stat=tmp_path / "nothing") is None


def test_omp_num_threads_and_the_recipe_win(monkeypatch, tmp_path):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert T.default_threads() is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")  # sleeping threads: every usable core
    assert T.default_threads() == len(T.usable_cpus())
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(T, "idle_cores", lambda cpus, *a, **k: 0.4)
    before = torch.get_num_threads()
    try:
        from gan_kit.testing import make_run

        make_run(tmp_path)  # run.threads unset: chosen from the (patched) idle cores
        assert torch.get_num_threads() == 1
        make_run(tmp_path, overrides=["run.threads=2"])
        assert torch.get_num_threads() == min(2, T.os.cpu_count())
    finally:
        torch.set_num_threads(before)


def test_the_thread_count_is_chosen_again_at_each_tick_from_the_load_reading(tmp_path):
    """A run that started on 2 free cores drops to 1 thread when another job takes a core, and
    goes back to 2 when it ends; never above the usable CPUs; an unknown reading changes nothing.
    The free-core reading is given to update() directly."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        follower = T.ThreadFollower([0, 1], stat=tmp_path / "no-stat")  # the readings are given below
        assert follower.update(free=1.1) == 1 and torch.get_num_threads() == 1   # a job took a core
        assert follower.update(free=1.2) is None and torch.get_num_threads() == 1
        assert follower.update(free=1.9) == 2 and torch.get_num_threads() == 2   # it ended
        assert follower.update(free=7.0) is None and torch.get_num_threads() == 2  # 2 usable CPUs at most
        assert follower.update() is None and torch.get_num_threads() == 2  # no reading: unchanged
    finally:
        torch.set_num_threads(before)


def test_free_cores_count_the_idle_time_and_this_process_own_use(tmp_path):
    """Between two readings 4 s apart: cpu0 was busy with another job, cpu1 idle half of the time,
    and this process used 2 CPU seconds (0.5 core): 0 + 0.5 + 0.5 free cores."""
    stat = tmp_path / "stat"
    stat.write_text("cpu 0 0 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\n")
    own, now = iter([10.0, 12.0]), iter([100.0, 104.0])
    follower = T.ThreadFollower([0, 1], stat=stat, own_cpu_seconds=lambda: next(own), clock=lambda: next(now))
    stat.write_text("cpu 0 0 0 0 0 0 0 0\ncpu0 500 0 0 100 0 0 0 0\ncpu1 300 0 0 300 0 0 0 0\n")
    assert follower.free_cores() == pytest.approx(1.0)
    assert T.ThreadFollower([0], stat=tmp_path / "nothing").free_cores() is None


def test_a_cpu_run_reports_its_threads_and_follows_the_machine_only_when_the_count_is_its_own(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert T.follows_machine(None, torch.device("cpu"))
    assert not T.follows_machine(2, torch.device("cpu"))  # run.threads wins
    assert not T.follows_machine(None, torch.device("cuda"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert not T.follows_machine(None, torch.device("cpu"))


def test_the_engine_rechooses_the_threads_at_each_tick(tmp_path):
    """A run on 1 thread whose reading at the first tick says 2 cores are free trains its second
    tick on 2 (metrics.jsonl's Timing/threads); the reading comes from the injected clocks."""
    import itertools
    import json

    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    run = make_run(tmp_path)
    torch.set_num_threads(1)
    stat = tmp_path / "stat"  # no jiffies pass in it: no idle time seen, only this process's own use
    stat.write_text("cpu 0 0 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\n")
    own, now = itertools.count(0.0, 2.0), itertools.count(0.0, 1.0)  # 2 CPU seconds per second: 2 cores
    run.thread_follower = T.ThreadFollower([0, 1], stat=stat, own_cpu_seconds=lambda: next(own),
                                           clock=lambda: next(now))
    train(run)
    rows = [json.loads(line) for line in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["Timing/threads"] for r in rows] == [1, 2]
