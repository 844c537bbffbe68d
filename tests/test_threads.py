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
